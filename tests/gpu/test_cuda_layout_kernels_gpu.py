"""The CUDA kernels that keep convolutional networks channels-last and move data
cheaply, on the GPU, against ONNX Runtime's CPU provider (float32) on fresh random
inputs:

* the channels-last depthwise convolution (``cuda_depthwise``) with its epilogues
  (bias, Clip, the SiLU post-op, a residual), odd channel counts (no 16-byte
  vectors), strides, dilations and asymmetric pads;
* the channels-last pools (NhwcMaxPool, NhwcAveragePool, NhwcGlobalAveragePool);
* the strided copy (Transpose, Slice, Concat) on its vectorized and 32-bit paths
  and Gather on its vectorized path, at shapes that land on each path and at ones
  that must fall back (odd inner sizes, unaligned offsets).

Run: ``pytest -m gpu tests/gpu/test_cuda_layout_kernels_gpu.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper
from xpuruntime.engines.native import engine as native_engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import test_plan_preview as models

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(bool(native_engine.unavailable_reason("cuda")), reason="no usable CUDA device"),
]

# Relative error (max |diff| / max |ref|) against ONNX Runtime's float32 CPU result.
TOL = {"fp32": 3e-5, "fp16": 1.5e-2, "bf16": 6e-2}


def _ort(model: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def _native(model: bytes, precision: str) -> xrt.InferenceSession:
    return xrt.InferenceSession(
        model, device="cuda", engine="native", exec_policy=xrt.ExecutionPolicy(precision=precision)
    )


def _rel(a, ref: np.ndarray) -> float:
    a = np.asarray(a).astype(np.float64)
    return float(np.abs(a - ref).max() / max(np.abs(ref).max(), 1e-30))


def _kernels(sess: xrt.InferenceSession) -> dict[str, str]:
    return {s["name"]: s["kernel"] for s in sess.plan.steps if not s["view"]}


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize(
    "act,c,k,stride", [("relu6", 32, 3, 1), ("silu", 32, 5, 2), ("relu6", 12, 7, 1), ("silu", 6, 3, 1)]
)
def test_depthwise_separable_block_channels_last_matches_onnxruntime(precision, act, c, k, stride):
    model = models._separable_block(act, c=c, k=k, stride=stride)
    x = np.random.default_rng(c + k).standard_normal((2, 16, 20, 20)).astype(np.float32)
    (ref,) = _ort(model, {"x": x})
    sess = _native(model, precision)
    ops = [s["op_type"] for s in sess.plan.steps if not s["view"]]
    assert "cuda_depthwise" in _kernels(sess).values() and "NhwcMaxPool" in ops, ops
    (y,) = sess.run({"x": x}).values()
    assert _rel(y, ref) <= TOL[precision]


def _f(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def _model(nodes, inputs, outputs, inits=()) -> bytes:
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize(
    "c,h,k,s,d,pads",
    [
        (24, 17, 3, 1, 1, [1, 1, 1, 1]),  # 3x3 unit stride: the register-window kernel
        (10, 15, 3, 2, 2, [0, 2, 1, 1]),  # C % 8 != 0: the runtime-window kernel
        (64, 9, 5, 1, 1, [2, 2, 2, 2]),  # 5x5 register window
        (12, 9, 5, 1, 1, [1, 2, 3, 0]),  # 5x5, uneven padding, 3 channel vectors
        (16, 13, 7, 1, 1, [3, 3, 3, 3]),  # 7x7 register window (ConvNeXt)
        (40, 12, 3, 2, 1, [1, 1, 1, 1]),  # 3x3 stride 2: fixed window, strided columns
        (32, 11, 3, 1, 2, [2, 2, 2, 2]),  # 3x3 dilated: fixed window, strided columns
        (16, 10, 5, 2, 1, [2, 1, 2, 1]),  # 5x5 stride 2, uneven padding
    ],
)
def test_depthwise_conv_geometry_between_channels_last_convs(precision, c, h, k, s, d, pads):
    # 1x1 -> depthwise -> 1x1 (+ residual-free), so the depthwise layer is inside a
    # channels-last region and runs on cuda_depthwise.
    rng = np.random.default_rng(c * h)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="pw1"),
        helper.make_node(
            "Conv", ["a", "wd", "bd"], ["b"], group=c, strides=[s, s], dilations=[d, d], pads=pads, name="dw"
        ),
        helper.make_node("Relu", ["b"], ["br"], name="relu"),
        helper.make_node("Conv", ["br", "w2"], ["y"], name="pw2"),
    ]
    oh = (h + pads[0] + pads[2] - d * (k - 1) - 1) // s + 1
    ow = (h + pads[1] + pads[3] - d * (k - 1) - 1) // s + 1
    inits = [
        numpy_helper.from_array((rng.standard_normal((c, 8, 1, 1)) * 0.3).astype(np.float32), "w1"),
        numpy_helper.from_array((rng.standard_normal((c, 1, k, k)) * 0.3).astype(np.float32), "wd"),
        numpy_helper.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), "bd"),
        numpy_helper.from_array((rng.standard_normal((8, c, 1, 1)) * 0.3).astype(np.float32), "w2"),
    ]
    model = _model(nodes, [_f("x", [3, 8, h, h])], [_f("y", [3, 8, oh, ow])], inits)
    x = rng.standard_normal((3, 8, h, h)).astype(np.float32)
    (ref,) = _ort(model, {"x": x})
    sess = _native(model, precision)
    assert _kernels(sess).get("dw") == "cuda_depthwise", _kernels(sess)
    (y,) = sess.run({"x": x}).values()
    assert _rel(y, ref) <= TOL[precision]


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize(
    "n,c,h,k",
    [
        (16, 96, 56, 3),  # 56x56 planes, as in PVT's and EfficientNet's first stages
        (8, 64, 56, 3),
        (4, 32, 30, 5),
        (2, 40, 7, 3),  # PVT's last stage
    ],
)
def test_depthwise_conv_with_fused_residual_at_model_sizes(precision, n, c, h, k):
    """The depthwise kernel at the plane sizes of real models, with the bias and a
    residual Add fused into its epilogue, against ONNX Runtime on fresh inputs."""
    rng = np.random.default_rng(n * c + h)
    p = k // 2
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="pw1"),
        helper.make_node("Conv", ["a", "wd", "bd"], ["b"], group=c, pads=[p] * 4, name="dw"),
        helper.make_node("Add", ["b", "a"], ["s"], name="residual"),
        helper.make_node("Relu", ["s"], ["sr"], name="relu"),
        helper.make_node("Conv", ["sr", "w2"], ["y"], name="pw2"),
    ]
    inits = [
        numpy_helper.from_array((rng.standard_normal((c, 8, 1, 1)) * 0.3).astype(np.float32), "w1"),
        numpy_helper.from_array((rng.standard_normal((c, 1, k, k)) * 0.3).astype(np.float32), "wd"),
        numpy_helper.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), "bd"),
        numpy_helper.from_array((rng.standard_normal((8, c, 1, 1)) * 0.3).astype(np.float32), "w2"),
    ]
    model = _model(nodes, [_f("x", [n, 8, h, h])], [_f("y", [n, 8, h, h])], inits)
    x = rng.standard_normal((n, 8, h, h)).astype(np.float32)
    (ref,) = _ort(model, {"x": x})
    sess = _native(model, precision)
    assert _kernels(sess).get("dw") == "cuda_depthwise", _kernels(sess)
    assert "residual" not in _kernels(sess), "the residual Add should fuse into the depthwise conv"
    (y,) = sess.run({"x": x}).values()
    assert _rel(y, ref) <= TOL[precision]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_average_pools_channels_last(precision):
    rng = np.random.default_rng(9)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1], name="c1"),
        helper.make_node(
            "AveragePool",
            ["a"],
            ["p"],
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
            count_include_pad=0,
            name="avg",
        ),
        helper.make_node("Conv", ["p", "w2"], ["q"], pads=[1, 1, 1, 1], name="c2"),
        helper.make_node(
            "AveragePool",
            ["q"],
            ["r"],
            kernel_shape=[2, 2],
            strides=[1, 1],
            pads=[0, 0, 1, 1],
            count_include_pad=1,
            name="avg_pad",
        ),
        helper.make_node("Conv", ["r", "w3"], ["t"], name="c3"),
        helper.make_node("GlobalAveragePool", ["t"], ["y"], name="gap"),
    ]
    inits = [
        numpy_helper.from_array((rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32), "w1"),
        numpy_helper.from_array((rng.standard_normal((16, 16, 3, 3)) * 0.2).astype(np.float32), "w2"),
        numpy_helper.from_array((rng.standard_normal((24, 16, 1, 1)) * 0.2).astype(np.float32), "w3"),
    ]
    model = _model(nodes, [_f("x", [2, 8, 15, 15])], [_f("y", [2, 24, 1, 1])], inits)
    x = rng.standard_normal((2, 8, 15, 15)).astype(np.float32)
    (ref,) = _ort(model, {"x": x})
    sess = _native(model, precision)
    ops = [s["op_type"] for s in sess.plan.steps if not s["view"]]
    assert {"NhwcAveragePool", "NhwcGlobalAveragePool"} <= set(ops), ops
    (y,) = sess.run({"x": x}).values()
    assert _rel(y, ref) <= TOL[precision]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize(
    "shape,perm",
    [
        ((4, 33, 12, 64), (0, 2, 1, 3)),  # head transpose: 16-byte vectors of the last dim
        ((4, 33, 12, 6), (0, 2, 1, 3)),  # inner run of 6: 4-byte units (fp16), scalar (fp32)
        ((2, 7, 5, 3), (3, 1, 0, 2)),  # inner dim changes: the element walk
        ((3, 40, 24), (0, 2, 1)),  # last two swapped
        ((3, 130, 66), (0, 2, 1)),  # even sides: the paired 64x64 tiles (fp16), partial tiles
        ((2, 32, 7, 9), (0, 2, 3, 1)),  # NCHW -> NHWC, odd H*W: the 32x32 tiles
        ((2, 3, 70, 2), (0, 2, 3, 1)),  # three channels (an image): rows odd, 32x32 tiles
    ],
)
def test_transposes_on_every_copy_path(precision, shape, perm):
    x = np.random.default_rng(len(shape) * 7 + shape[-1]).standard_normal(shape).astype(np.float32)
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=list(perm), name="tr"),
        helper.make_node("Neg", ["t"], ["y"], name="neg"),  # the Transpose is not an output
    ]
    out = [shape[p] for p in perm]
    model = _model(nodes, [_f("x", list(shape))], [_f("y", out)])
    (y,) = _native(model, precision).run({"x": x}).values()
    assert _rel(y, -np.transpose(x.astype(np.float64), perm)) <= TOL[precision]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_slices_and_concats_at_aligned_and_unaligned_offsets(precision):
    x = np.random.default_rng(21).standard_normal((3, 10, 72)).astype(np.float32)

    def const(name, v):
        return numpy_helper.from_array(np.array(v, dtype=np.int64), name)

    nodes = [
        helper.make_node("Slice", ["x", "s0", "e0", "ax"], ["a"], name="sl_aligned"),  # [.., 8:40]
        helper.make_node("Slice", ["x", "s1", "e1", "ax"], ["b"], name="sl_odd"),  # [.., 3:36]
        helper.make_node("Concat", ["a", "b", "x"], ["c"], axis=2, name="cat"),  # 32 + 33 + 72
        helper.make_node("Neg", ["c"], ["y"], name="neg"),
    ]
    inits = [const("s0", [8]), const("e0", [40]), const("s1", [3]), const("e1", [36]), const("ax", [2])]
    model = _model(nodes, [_f("x", [3, 10, 72])], [_f("y", [3, 10, 137])], inits)
    (y,) = _native(model, precision).run({"x": x}).values()
    x64 = x.astype(np.float64)
    ref = -np.concatenate([x64[..., 8:40], x64[..., 3:36], x64], axis=2)
    assert _rel(y, ref) <= TOL[precision]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("axis,idx", [(0, 1), (1, [4, 0, -1, 2]), (2, [5, 1])])
def test_gather_rows_and_scalars(precision, axis, idx):
    x = np.random.default_rng(axis).standard_normal((3, 6, 40)).astype(np.float32)
    ind = np.array(idx, dtype=np.int64)
    nodes = [
        helper.make_node("Gather", ["x", "i"], ["g"], axis=axis, name="gather"),
        helper.make_node("Neg", ["g"], ["y"], name="neg"),
    ]
    ref = -np.take(x.astype(np.float64), ind, axis=axis)
    model = _model(
        nodes,
        [_f("x", [3, 6, 40])],
        [_f("y", list(ref.shape))],
        [numpy_helper.from_array(ind, "i")],
    )
    (y,) = _native(model, precision).run({"x": x}).values()
    assert _rel(y, ref) <= TOL[precision]


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("form", ["reciprocal", "div"])
def test_rmsnorm_fusion_runs_as_one_cuda_kernel(precision, form):
    import test_rmsnorm_fusion as rms

    model = rms._decomposed(form=form, casts=True).SerializeToString()
    x = (3.0 * np.random.default_rng(5).standard_normal((2, 7, rms.D)) + 0.5).astype(np.float32)
    (ref,) = _ort(model, {"x": x})
    sess = _native(model, precision)
    ops = [s["op_type"] for s in sess.plan.steps if not s["view"]]
    assert ops.count("RMSNormalization") == 1 and "ReduceMean" not in ops, ops
    (y,) = sess.run({"x": x}).values()
    assert _rel(y, ref) <= TOL[precision]


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("table", ["input", "constant"])
def test_rotary_fusion_runs_as_one_cuda_kernel(precision, table):
    import test_rotary_fusion as rope

    m = rope._rope(table=table)
    model = m.SerializeToString()
    feeds = rope._feeds(m)
    (ref,) = _ort(model, feeds)
    sess = _native(model, precision)
    ops = [s["op_type"] for s in sess.plan.steps if not s["view"]]
    assert ops == ["RotaryHalf"] or (ops.count("RotaryHalf") == 1 and "Concat" not in ops), ops
    (y,) = sess.run(feeds).values()
    assert _rel(y, ref) <= TOL[precision]


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_attention_without_head_transposes_matches_onnxruntime(precision):
    model = models._bert_attention()
    rng = np.random.default_rng(17)
    feeds = {n: rng.standard_normal((2, 40, 4, 64)).astype(np.float32) for n in "qkv"}
    (ref,) = _ort(model, feeds)
    sess = _native(model, precision)
    ops = [s["op_type"] for s in sess.plan.steps if not s["view"]]
    assert ops.count("FusedAttention") == 1 and "Transpose" not in ops, ops
    (y,) = sess.run(feeds).values()
    assert _rel(y, ref) <= TOL[precision]


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_dense_block_batchnorm_channels_last_matches_onnxruntime(precision):
    """DenseNet's Concat -> BatchNormalization -> Relu -> Conv with the BatchNormalization
    as a per-channel Mul and Add in the plan's dtype, channels-last."""
    model = models._dense_block()
    x = np.random.default_rng(9).standard_normal((2, 3, 12, 12)).astype(np.float32)
    (ref,) = _ort(model, {"x": x})
    sess = _native(model, precision)
    ops = [s["op_type"] for s in sess.plan.steps if not s["view"]]
    assert "BatchNormalization" not in ops and ops.count("NhwcConv") == 5, ops
    (y,) = sess.run({"x": x}).values()
    assert _rel(y, ref) <= TOL[precision]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("back_perm", [(0, 2, 1), (2, 1, 0)])
def test_tokens_to_image_and_back_without_transposes_matches_onnxruntime(precision, back_perm):
    """PVT's tokens -> image -> convolutions -> tokens with the Transpose/Reshape chains
    folded into views (and a real permutation on the way back kept)."""
    model = models._tokens_conv_tokens(back_perm=back_perm)
    x = np.random.default_rng(8).standard_normal((2, 48, 16)).astype(np.float32)
    (ref,) = _ort(model, {"x": x})
    sess = _native(model, precision)
    ops = [s["op_type"] for s in sess.plan.steps if not s["view"]]
    assert ("Transpose" in ops) == (back_perm != (0, 2, 1)), ops
    (y,) = sess.run({"x": x}).values()
    assert _rel(y, ref) <= TOL[precision]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_squeeze_excite_on_few_large_images(precision):
    """An SE block on 2 images of 48x48 pixels: the channels-last global pools reduce in
    pixel chunks merged in order (few images, many pixels), and the gate [N, 1, 1, C]
    multiplies [N, H, W, C]; 40 channels (16-byte vectors in fp16) and 20 (not)."""
    rng = np.random.default_rng(31)
    for c in (40, 20):
        nodes = [
            helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1], name="c1"),
            helper.make_node("GlobalAveragePool", ["a"], ["s"], name="gap"),
            helper.make_node("GlobalMaxPool", ["a"], ["m"], name="gmp"),
            helper.make_node("Add", ["s", "m"], ["sm"], name="mix"),
            helper.make_node("Conv", ["sm", "w2"], ["g0"], name="fc"),
            helper.make_node("Sigmoid", ["g0"], ["g"], name="gate"),
            helper.make_node("Mul", ["a", "g"], ["e"], name="excite"),
            helper.make_node("Conv", ["e", "w3"], ["y"], name="c3"),
        ]
        inits = [
            numpy_helper.from_array((rng.standard_normal((c, 8, 3, 3)) * 0.2).astype(np.float32), "w1"),
            numpy_helper.from_array((rng.standard_normal((c, c, 1, 1)) * 0.2).astype(np.float32), "w2"),
            numpy_helper.from_array((rng.standard_normal((16, c, 1, 1)) * 0.2).astype(np.float32), "w3"),
        ]
        model = _model(nodes, [_f("x", [2, 8, 48, 48])], [_f("y", [2, 16, 48, 48])], inits)
        x = rng.standard_normal((2, 8, 48, 48)).astype(np.float32)
        (ref,) = _ort(model, {"x": x})
        sess = _native(model, precision)
        ops = [s["op_type"] for s in sess.plan.steps if not s["view"]]
        assert "NhwcGlobalAveragePool" in ops, ops
        (y,) = sess.run({"x": x}).values()
        assert _rel(y, ref) <= TOL[precision], (c, _rel(y, ref))


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_poolformer_block(precision):
    """PoolFormer's token mixer as torch exports it: GroupNorm with one group
    (Reshape [N, 1, -1] -> InstanceNormalization -> Reshape -> Mul/Add by [C, 1, 1]), a
    3x3 AveragePool (stride 1, pad 1, padding not counted) minus its input, a layer scale
    [C, 1, 1] and the residual Add: the chunked InstanceNormalization (2 rows of 150,000),
    the 2-D pool and the per-channel row broadcast, against ONNX Runtime."""
    rng = np.random.default_rng(37)
    n, c, h, w = 2, 24, 50, 125

    def const(name, v, dt=np.float32):
        return numpy_helper.from_array(np.asarray(v, dtype=dt), name)

    nodes = [
        helper.make_node("Reshape", ["x", "grp"], ["r"], name="gn_reshape"),
        helper.make_node("InstanceNormalization", ["r", "one", "zero"], ["nr"], epsilon=1e-5, name="gn"),
        helper.make_node("Reshape", ["nr", "shp"], ["n0"], name="gn_back"),
        helper.make_node("Mul", ["n0", "gamma"], ["n1"], name="gn_scale"),
        helper.make_node("Add", ["n1", "beta"], ["n2"], name="gn_shift"),
        helper.make_node(
            "AveragePool",
            ["n2"],
            ["p"],
            kernel_shape=[3, 3],
            strides=[1, 1],
            pads=[1, 1, 1, 1],
            count_include_pad=0,
            name="pool",
        ),
        helper.make_node("Sub", ["p", "n2"], ["d"], name="mix"),
        helper.make_node("Mul", ["d", "ls"], ["e"], name="layer_scale"),
        helper.make_node("Add", ["x", "e"], ["y"], name="residual"),
    ]
    inits = [
        const("grp", [n, 1, -1], np.int64),
        const("shp", [n, c, h, w], np.int64),
        const("one", [1.0]),
        const("zero", [0.0]),
        const("gamma", rng.uniform(0.5, 1.5, (c, 1, 1))),
        const("beta", rng.uniform(-0.5, 0.5, (c, 1, 1))),
        const("ls", rng.uniform(-1, 1, (c, 1, 1))),
    ]
    model = _model(nodes, [_f("x", [n, c, h, w])], [_f("y", [n, c, h, w])], inits)
    x = (rng.standard_normal((n, c, h, w)) + 3.0).astype(np.float32)  # an offset: the pivot
    (ref,) = _ort(model, {"x": x})
    (y,) = _native(model, precision).run({"x": x}).values()
    assert _rel(y, ref) <= TOL[precision]
