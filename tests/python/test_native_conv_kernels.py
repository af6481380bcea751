"""The native CPU Conv kernels against a NumPy float64 reference on random inputs.

Covers the direct depthwise kernel (strides 1-3, dilation, asymmetric padding,
channel multipliers, odd plane sizes, every fused activation), the direct 2-D kernel
(cpu_direct) and the im2col kernel's tilings (column tiles, row tiles for narrow planes, the GEMV of 1×1 planes,
groups, batches, 1-D and 3-D), the fused residual, and the GEMV path of a
one-row Gemm/MatMul — under both CPU GEMM kernels; and 2-D MaxPool against ORT.
"""

from __future__ import annotations

import gc
import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xpuruntime as xrt
from xpuruntime import ops


@pytest.fixture(autouse=True, scope="module")
def _free_sessions_after_module():  # type: ignore[no-untyped-def]
    """Frees this module's sessions (and their arenas) before other modules run, so
    allocator-statistics tests elsewhere never see them released mid-test."""
    yield
    gc.collect()


GEMMS = ["cpu_blocked"] + (["cpu_blas"] if ops.cpu_gemm_info()["blas_available"] else [])
# Non-depthwise 2-D convolutions run on both kernels: cpu_direct (the default where
# the CPU has AVX2/FMA) and cpu_im2col under each GEMM kernel.
DIRECT_OK = ops.cpu_gemm_info()["isa"] in ("avx2", "avx512")  # cpu_direct needs AVX2/FMA (AVX-512 CPUs have it)
DENSE = [("cpu_direct", GEMMS[0])] + [("cpu_im2col", g) for g in GEMMS]


def ref_conv(x, w, b, strides, pads, dil, group):  # type: ignore[no-untyped-def]
    """N-d convolution in float64 (pads: begins then ends, ONNX order)."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    r = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + r]) for i in range(r)])
    ks = w.shape[2:]
    out_sp = [(xp.shape[2 + i] - (ks[i] - 1) * dil[i] - 1) // strides[i] + 1 for i in range(r)]
    n, c = x.shape[:2]
    m = w.shape[0]
    cg, mg = c // group, m // group
    y = np.zeros((n, m, *out_sp))
    for tap in itertools.product(*[range(k) for k in ks]):
        sl = tuple(
            slice(tap[i] * dil[i], tap[i] * dil[i] + (out_sp[i] - 1) * strides[i] + 1, strides[i])
            for i in range(r)
        )
        for g in range(group):
            xs = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + sl]
            ws = w[(slice(g * mg, (g + 1) * mg), slice(None)) + tap]
            y[:, g * mg : (g + 1) * mg] += np.einsum("nc...,mc->nm...", xs, ws)
    if b is not None:
        y += b.reshape((1, m) + (1,) * r)
    return y


def act_ref(kind: str | None, y: np.ndarray) -> np.ndarray:
    if kind is None:
        return y
    if kind == "Relu":
        return np.maximum(y, 0)
    if kind == "HardSwish":
        return y * np.clip(y / 6 + 0.5, 0, 1)
    if kind == "HardSigmoid":
        return np.clip(0.2 * y + 0.5, 0, 1)
    if kind == "Clip":
        return np.clip(y, 0.0, 6.0)
    if kind == "LeakyRelu":
        return np.where(y >= 0, y, 0.01 * y)
    if kind == "Sigmoid":
        return 1 / (1 + np.exp(-y))
    raise ValueError(kind)


def conv_model(x_shape, w, b, strides, pads, dil, group, act=None, residual=False, y_shape=None):  # type: ignore[no-untyped-def]
    inits = [numpy_helper.from_array(w, "W")]
    ins = ["X", "W"]
    if b is not None:
        inits.append(numpy_helper.from_array(b, "B"))
        ins.append("B")
    attrs = dict(strides=strides, pads=pads, dilations=dil, group=group, kernel_shape=list(w.shape[2:]))
    nodes = [helper.make_node("Conv", ins, ["c"], name="conv", **attrs)]
    cur = "c"
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x_shape))]
    if residual:
        nodes.append(helper.make_node("Add", [cur, "R"], ["s"], name="add"))
        inputs.append(helper.make_tensor_value_info("R", TensorProto.FLOAT, list(y_shape)))
        cur = "s"
    if act is not None:
        extra = {}
        act_ins = [cur]
        if act == "Clip":
            inits += [
                numpy_helper.from_array(np.float32(0.0), "lo"),
                numpy_helper.from_array(np.float32(6.0), "hi"),
            ]
            act_ins += ["lo", "hi"]
        nodes.append(helper.make_node(act, act_ins, ["Y"], name="act", **extra))
    else:
        nodes.append(helper.make_node("Identity", [cur], ["Y"], name="out"))
    graph = helper.make_graph(
        nodes, "conv", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, y_shape)], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def check(
    x_shape, w_shape, strides, pads, dil, group, act=None, residual=False, bias=True, seed=0, convs=None
):  # type: ignore[no-untyped-def]
    """Runs the model under each (conv kernel, GEMM kernel) of ``convs`` (default: the
    default conv kernel under each GEMM kernel) and compares with float64."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32) if bias else None
    y = ref_conv(x, w, b, strides, pads, dil, group)
    feeds = {"X": x}
    if residual:
        feeds["R"] = rng.standard_normal(y.shape).astype(np.float32)
        y = y + feeds["R"]
    y = act_ref(act, y)
    model = conv_model(
        x_shape, w, b, strides, pads, dil, group, act, residual, list(y.shape)
    ).SerializeToString()
    for conv, gemm in convs or [(None, g) for g in GEMMS]:
        # cpu_direct's refusals fall back to cpu_im2col (above it, onednn would take them).
        chain = [conv, "cpu_im2col"] if conv == "cpu_direct" else conv
        policy = xrt.KernelPolicy(matmul=gemm, **({"conv": chain} if conv else {}))
        sess = xrt.InferenceSession(model, device="cpu", engine="native", kernel_policy=policy)
        if conv == "cpu_direct" and not DIRECT_OK:
            continue
        if conv:
            # cpu_direct turns 1×1 output planes down (prefer mode: im2col runs them).
            want = "cpu_im2col" if conv == "cpu_direct" and np.prod(y.shape[2:]) <= 1 else conv
            assert next(s["kernel"] for s in sess.plan.steps if s["op_type"] == "Conv") == want
        out = sess.run(feeds)["Y"]
        assert out.shape == y.shape
        err = np.abs(out - y).max()
        tag = (conv, gemm, x_shape, w_shape, strides, pads, dil, act, err)
        assert err <= 1e-5 * max(1.0, np.abs(y).max()) * 4, tag


DW_CASES = [
    # (C, H, W, K, stride, pads [t, l, b, r], dilation, multiplier)
    (5, 7, 7, (3, 3), 1, [1, 1, 1, 1], 1, 1),
    (16, 13, 9, (3, 3), 2, [1, 1, 1, 1], 1, 1),
    (3, 23, 37, (5, 5), 2, [2, 2, 2, 2], 1, 1),
    (4, 11, 45, (5, 5), 1, [2, 2, 2, 2], 1, 2),
    (2, 9, 17, (3, 3), 3, [0, 2, 1, 0], 1, 1),
    (3, 15, 19, (3, 3), 1, [2, 2, 2, 2], 2, 1),
    (2, 6, 40, (1, 7), 1, [0, 3, 0, 3], 1, 1),
    (3, 1, 1, (3, 3), 1, [1, 1, 1, 1], 1, 1),
    (7, 28, 28, (3, 3), 2, [0, 0, 1, 1], 1, 1),
    (2, 20, 20, (17, 3), 1, [8, 1, 8, 1], 1, 1),  # taller than the vector kernel's 16: portable loops
]


@pytest.mark.parametrize("case", DW_CASES, ids=[f"dw{i}" for i in range(len(DW_CASES))])
@pytest.mark.parametrize("act", [None, "Relu", "HardSwish"])
def test_depthwise_matches_float64_reference(case, act) -> None:  # type: ignore[no-untyped-def]
    c, h, w, k, s, pads, d, mult = case
    check((2, c, h, w), (c * mult, 1, *k), [s, s], pads, [d, d], c, act=act, seed=h * w + c)


@pytest.mark.parametrize("act", ["HardSigmoid", "Clip", "LeakyRelu", "Sigmoid"])
def test_depthwise_other_activations_and_residual(act) -> None:  # type: ignore[no-untyped-def]
    check((1, 6, 14, 14), (6, 1, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 6, act=act, seed=3)
    check(
        (1, 6, 14, 14),
        (6, 1, 3, 3),
        [1, 1],
        [1, 1, 1, 1],
        [1, 1],
        6,
        act=act,
        residual=True,
        bias=False,
        seed=4,
    )


IM2COL_CASES = [
    # (x shape, w shape, strides, pads, dilations, group)
    ((1, 16, 56, 56), (24, 16, 1, 1), [1, 1], [0, 0, 0, 0], [1, 1], 1),  # 1×1, column tiles
    ((1, 40, 7, 7), (96, 40, 1, 1), [1, 1], [0, 0, 0, 0], [1, 1], 1),  # 1×1, row tiles
    ((2, 37, 1, 1), (50, 37, 1, 1), [1, 1], [0, 0, 0, 0], [1, 1], 1),  # 1×1 plane: GEMV
    ((1, 3, 45, 45), (16, 3, 3, 3), [2, 2], [1, 1, 1, 1], [1, 1], 1),  # stem-like
    ((1, 32, 31, 29), (40, 32, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 1),  # column tiles, im2col
    ((1, 64, 7, 7), (72, 64, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 1),  # narrow: row tiles
    ((1, 300, 9, 9), (40, 300, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 1),  # row tiles, channel chunks
    ((2, 96, 8, 8), (34, 48, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 2),  # chunks, groups, batch
    ((1, 24, 14, 14), (64, 24, 3, 3), [2, 2], [0, 1, 1, 0], [1, 1], 1),
    ((2, 8, 19, 17), (12, 4, 3, 3), [1, 2], [1, 1, 1, 1], [2, 1], 2),  # groups, dilation
    ((2, 12, 9, 9), (12, 4, 1, 1), [1, 1], [0, 0, 0, 0], [1, 1], 3),  # grouped 1×1
    ((1, 16, 200, 150), (8, 16, 5, 5), [1, 1], [2, 2, 2, 2], [1, 1], 1),  # many column tiles
]


@pytest.mark.parametrize("case", IM2COL_CASES, ids=[f"im2col{i}" for i in range(len(IM2COL_CASES))])
@pytest.mark.parametrize("act", [None, "HardSwish"])
def test_im2col_tilings_match_float64_reference(case, act) -> None:  # type: ignore[no-untyped-def]
    xs, ws, s, p, d, g = case
    check(xs, ws, s, p, d, g, act=act, seed=sum(xs) + sum(ws), convs=DENSE if len(xs) == 4 else None)


RESIDUAL_CASES = [
    # (x shape, w shape, pads, activation, bias)
    ((1, 32, 28, 28), (32, 32, 3, 3), [1, 1, 1, 1], "Relu", True),
    ((1, 64, 7, 7), (64, 64, 3, 3), [1, 1, 1, 1], "Relu", False),
    ((1, 40, 7, 7), (96, 40, 1, 1), [0, 0, 0, 0], "Clip", True),
]


@pytest.mark.parametrize("case", RESIDUAL_CASES, ids=[f"residual{i}" for i in range(len(RESIDUAL_CASES))])
@pytest.mark.parametrize("conv", [None, "cpu_im2col"], ids=["default", "im2col"])
def test_im2col_residual_and_no_bias(case, conv) -> None:  # type: ignore[no-untyped-def]
    xs, ws, pads, act, bias = case
    convs = [(conv, g) for g in GEMMS] if conv else DENSE  # the named kernel, or every one
    check(xs, ws, [1, 1], pads, [1, 1], 1, act=act, residual=True, bias=bias, convs=convs)


DIRECT_CASES = [
    # The direct kernel's own edges: (x shape, w shape, strides, pads, dilations, group)
    ((1, 8, 12, 12), (7, 8, 3, 3), [1, 1], [0, 0, 0, 0], [1, 1], 1),  # no padding, kw > 1: copied
    ((1, 8, 12, 12), (13, 8, 3, 1), [1, 1], [0, 0, 0, 0], [1, 1], 1),  # kw == 1: the input itself
    ((1, 5, 9, 16), (11, 5, 1, 1), [1, 1], [0, 0, 0, 0], [1, 1], 1),  # 144 positions: whole tiles
    ((1, 5, 9, 15), (11, 5, 1, 1), [1, 1], [0, 0, 0, 0], [1, 1], 1),  # 135: 7 masked lanes
    ((1, 6, 7, 7), (70, 6, 1, 1), [1, 1], [0, 0, 0, 0], [1, 1], 1),  # 49: one narrow column
    ((1, 9, 14, 14), (130, 9, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 1),  # narrow columns, >96 rows
    ((1, 40, 11, 13), (9, 40, 3, 3), [2, 3], [1, 0, 2, 1], [1, 2], 1),  # phases, asymmetric pads
    ((1, 3, 30, 31), (17, 3, 7, 7), [2, 2], [3, 3, 3, 3], [1, 1], 1),  # 7×7 stem
    ((1, 129, 10, 10), (20, 129, 2, 2), [1, 1], [0, 1, 1, 0], [1, 1], 1),  # K chunks of whole channels
    ((3, 6, 5, 8), (4, 3, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 2),  # batch and groups
    ((1, 4, 1, 40), (5, 4, 1, 3), [1, 1], [0, 1, 0, 1], [1, 1], 1),  # one output row
]


@pytest.mark.parametrize("case", DIRECT_CASES, ids=[f"direct{i}" for i in range(len(DIRECT_CASES))])
@pytest.mark.parametrize("act", [None, "Relu"])
def test_direct_kernel_matches_float64_reference(case, act) -> None:  # type: ignore[no-untyped-def]
    xs, ws, s, p, d, g = case
    check(xs, ws, s, p, d, g, act=act, seed=sum(xs) * 7 + sum(ws), convs=DENSE)
    check(xs, ws, s, p, d, g, act=act, residual=True, bias=False, seed=sum(ws), convs=DENSE[:1])


def _onednn_conv_available() -> bool:
    w = np.ones((2, 1, 1, 1), np.float32)
    model = conv_model((1, 1, 2, 2), w, None, [1, 1], [0] * 4, [1, 1], 1, None, y_shape=[1, 2, 2, 2])
    policy = xrt.KernelPolicy(conv="onednn")
    sess = xrt.InferenceSession(model.SerializeToString(), device="cpu", engine="native", kernel_policy=policy)
    (d,) = sess.explain().filter(op="conv")
    return d.chosen == "onednn"


def test_dense_conv_default_and_explained() -> None:
    # Dense convolutions: oneDNN's where the build has it, else our direct kernel (AVX2),
    # else im2col. A lone Conv stays NCHW (channels-last would need a Transpose on each
    # side: test_channels_last.py covers the layout pass).
    w = np.ones((6, 4, 3, 3), np.float32)
    model = conv_model((1, 4, 9, 9), w, None, [1, 1], [1, 1, 1, 1], [1, 1], 1, None, y_shape=[1, 6, 9, 9])
    sess = xrt.InferenceSession(model.SerializeToString(), device="cpu", engine="native")
    if _onednn_conv_available():
        step = next(s for s in sess.plan.steps if s["op_type"] == "Conv")
        assert step["kernel"] == "onednn"
        (lay,) = sess.explain().filter(op="layout")
        assert lay.chosen == "nchw" and "cost more than they save" in lay.detail
        # a pinned NCHW kernel order keeps the model's layout, and oneDNN runs NCHW too
        pinned = xrt.KernelPolicy(conv=["onednn", "cpu_direct"])
        sess = xrt.InferenceSession(model.SerializeToString(), device="cpu", engine="native", kernel_policy=pinned)
        assert next(s for s in sess.plan.steps if s["op_type"] == "Conv")["kernel"] == "onednn"
        (lay,) = sess.explain().filter(op="layout")
        assert lay.chosen == "nchw" and "conv_nhwc" in lay.detail
    else:
        step = next(s for s in sess.plan.steps if s["op_type"] == "Conv")
        assert step["kernel"] == ("cpu_direct" if DIRECT_OK else "cpu_im2col")
    # A 1×1 output plane is rejected by cpu_direct with its reason (cpu_im2col's GEMV runs it).
    one = conv_model((1, 4, 3, 3), w, None, [1, 1], [0, 0, 0, 0], [1, 1], 1, None, y_shape=[1, 6, 1, 1])
    policy = xrt.KernelPolicy(conv=["cpu_direct", "cpu_im2col"])
    sess = xrt.InferenceSession(one.SerializeToString(), device="cpu", engine="native", kernel_policy=policy)
    assert next(s for s in sess.plan.steps if s["op_type"] == "Conv")["kernel"] == "cpu_im2col"
    (d,) = sess.explain().filter(op="conv")
    direct = next(c for c in d.candidates if c.kernel == "cpu_direct")
    assert d.chosen == "cpu_im2col" and direct.reason_code in ("shape_unsupported", "capability_too_low")


def test_conv_1d_and_3d() -> None:
    check((2, 5, 33), (7, 5, 3), [2], [1, 1], [1], 1, act="Relu")
    check((1, 4, 6, 7, 8), (6, 4, 3, 3, 3), [1, 2, 1], [1, 1, 1, 1, 1, 1], [1, 1, 1], 1)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_one_row_gemm_matches_numpy(trans_b: int) -> None:
    rng = np.random.default_rng(7)
    k, n = 300, 517
    a = rng.standard_normal((1, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    node = helper.make_node("Gemm", ["A", "B", "C"], ["Y"], transB=trans_b)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, n])],
        [numpy_helper.from_array(b, "B"), numpy_helper.from_array(c, "C")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    ref = a.astype(np.float64) @ (b.T if trans_b else b).astype(np.float64) + c
    for gemm in GEMMS:
        sess = xrt.InferenceSession(
            model, device="cpu", engine="native", kernel_policy=xrt.KernelPolicy(matmul=gemm)
        )
        out = sess.run({"A": a})["Y"]
        assert np.abs(out - ref).max() <= 1e-4 * np.abs(ref).max(), gemm


def test_depthwise_kernel_is_chosen_for_depthwise_convs() -> None:
    c = 8
    w = np.zeros((c, 1, 3, 3), np.float32)
    model = conv_model(
        (1, c, 10, 10), w, None, [1, 1], [1, 1, 1, 1], [1, 1], c, "Relu", y_shape=[1, c, 10, 10]
    )
    model = model.SerializeToString()
    # Where oneDNN runs the model channels-last, the NCHW kernels are chosen by a policy
    # that pins them (cpu_depthwise first here; it refuses dense convolutions).
    kp = xrt.KernelPolicy(conv=["cpu_depthwise", "cpu_direct", "cpu_im2col"]) if _onednn_conv_available() else None
    sess = xrt.InferenceSession(model, device="cpu", engine="native", kernel_policy=kp)
    step = next(s for s in sess.plan.steps if s["op_type"] == "Conv")
    assert step["kernel"] == "cpu_depthwise" and step["activation"] == "Relu"


@pytest.mark.parametrize(
    "shape,k,s,pads,dil,ceil",
    [
        ((1, 3, 112, 112), [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 0),
        ((2, 2, 13, 17), [3, 2], [1, 2], [1, 0, 1, 1], [1, 1], 1),
        ((1, 2, 20, 21), [3, 3], [2, 2], [2, 2, 2, 2], [2, 2], 0),
        ((1, 1, 9, 9), [5, 5], [3, 3], [0, 0, 0, 0], [1, 1], 1),
    ],
)
def test_maxpool_2d_matches_onnxruntime(shape, k, s, pads, dil, ceil) -> None:  # type: ignore[no-untyped-def]
    ort = pytest.importorskip("onnxruntime")
    node = helper.make_node(
        "MaxPool", ["X"], ["Y"], kernel_shape=k, strides=s, pads=pads, dilations=dil, ceil_mode=ceil
    )
    graph = helper.make_graph(
        [node],
        "p",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model = onnx.shape_inference.infer_shapes(model)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"X": x}
    )[0]
    out = xrt.InferenceSession(model.SerializeToString(), device="cpu", engine="native").run({"X": x})["Y"]
    np.testing.assert_array_equal(out, ref)
