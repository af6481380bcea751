"""The compiler's channels-last layout pass (cpp/src/graph/layout_channels_last.cpp).

Convolutional graphs built here (Conv 1-D/2-D/3-D, a squeeze-excitation block, a
residual, Concat, Split, Slice, ShuffleNet's channel shuffle, ReduceMean over H and W, an
unfolded BatchNormalization, pooling, elementwise ops with constants of every broadcast
rank, a Transpose pair around a LayerNormalization, Shape, graph outputs read in both
layouts, wide Conv1d layers run as GEMMs) run through the native engine with the default
policy, where the pass moves them to channels-last, and are compared with ONNX
Runtime on fresh random inputs (tolerance 1e-4 relative to the output's magnitude).
These small graphs ask for the layout with ``KernelPolicy(conv_nhwc="onednn")``; by
default the pass keeps a graph NCHW where the Transposes between the layouts would
move at least as much as the convolutions read and write (a lone Conv), and
converts a deep chain. The plan records the layout Decision and NhwcConv steps; a policy
that pins NCHW Conv kernels keeps NCHW (and matches too); dynamic batch runs at several shapes; a saved
plan reloads and gives the same bits; NaN still propagates through a fused Relu.
Skips, saying why, when the build has no oneDNN.
"""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper
from xpuruntime import ops

RTOL = 1e-4


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    fan_in = int(np.prod(shape[1:]))
    return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)


class Builder:
    """A tiny ONNX graph builder (opset 17) with random weights."""

    def __init__(self, seed: int) -> None:
        self.rng = _rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.n = 0

    def name(self, p: str) -> str:
        self.n += 1
        return f"{p}{self.n}"

    def const(self, arr: np.ndarray) -> str:
        nm = self.name("k")
        self.inits.append(numpy_helper.from_array(arr, nm))
        return nm

    def op(self, op: str, ins: list[str], n_out: int = 1, **attrs) -> list[str]:  # type: ignore[no-untyped-def]
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, ins, outs, name=self.name(op + "_"), **attrs))
        return outs

    def conv(
        self,
        x: str,
        cin: int,
        cout: int,
        k: int,
        rank: int = 2,
        stride: int = 1,
        group: int = 1,
        bias: bool = True,
    ) -> str:
        w = self.const(_w(self.rng, cout, cin // group, *([k] * rank)))
        ins = [x, w] + ([self.const(self.rng.standard_normal(cout).astype(np.float32) * 0.1)] if bias else [])
        return self.op(
            "Conv",
            ins,
            kernel_shape=[k] * rank,
            strides=[stride] * rank,
            pads=[k // 2] * (2 * rank),
            group=group,
        )[0]

    def model(self, inputs: list, outputs: list) -> bytes:
        g = helper.make_graph(self.nodes, "cl", inputs, outputs, self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def out(name: str, rank: int, elem: int = TensorProto.FLOAT):  # type: ignore[no-untyped-def]
    """A graph output of known rank, dims left symbolic."""
    return helper.make_tensor_value_info(name, elem, [f"{name}_d{i}" for i in range(rank)])


ASK = xrt.KernelPolicy(conv_nhwc="onednn")


def compare(model: bytes, feeds: dict[str, np.ndarray], **kw) -> xrt.InferenceSession:  # type: ignore[no-untyped-def]
    """Runs the model natively (channels-last asked for unless a policy is given) and on
    ONNX Runtime; asserts every output matches."""
    kw.setdefault("kernel_policy", ASK)
    sess = xrt.InferenceSession(model, device="cpu", engine="native", **kw)
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = [o.name for o in ref.get_outputs()]
    want = ref.run(None, feeds)
    got = sess.run(feeds)
    for n, w in zip(names, want):
        g = np.asarray(got[n])
        assert g.shape == w.shape, (n, g.shape, w.shape)
        scale = max(float(np.max(np.abs(w))), 1e-6)
        err = float(np.max(np.abs(g.astype(np.float64) - w))) / scale
        assert err <= RTOL, f"output {n}: relative error {err:.2e}"
    return sess


def decisions(sess: xrt.InferenceSession) -> list[dict]:
    out = []
    for d in sess.explain().to_list():
        out.append(d if isinstance(d, dict) else json.loads(d))
    return out


def layout_decision(sess: xrt.InferenceSession) -> dict:
    (d,) = [d for d in decisions(sess) if d["op"] == "layout"]
    return d


def ops_of(sess: xrt.InferenceSession) -> list[str]:
    return [d["op"] for d in decisions(sess)]


def _onednn_missing() -> str:
    info = ops.cpu_gemm_info()["onednn"]
    return "" if info.startswith("oneDNN ") else info


MISSING = _onednn_missing()
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING)


def convnet(seed: int, batch: int | str = 1) -> bytes:
    """A small network using every op family the pass converts (2-D)."""
    b = Builder(seed)
    x = "X"
    c1 = b.op("Relu", [b.conv(x, 3, 16, 3, stride=2)])[0]
    p = b.op("MaxPool", [c1], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])[0]
    # depthwise + pointwise with a per-channel constant of rank 3 ([C,1,1]) and a
    # row constant of rank 1 (broadcast along W, not C)
    dw = b.conv(p, 16, 16, 3, group=16)
    dw = b.op("Mul", [dw, b.const(b.rng.standard_normal((16, 1, 1)).astype(np.float32))])[0]
    dw = b.op("Add", [dw, b.const(b.rng.standard_normal((8,)).astype(np.float32))])[0]
    dw = b.op("Clip", [dw, b.const(np.array(-1.0, np.float32)), b.const(np.array(2.0, np.float32))])[0]
    pw = b.conv(dw, 16, 24, 1)
    # squeeze-excitation
    s = b.op("GlobalAveragePool", [pw])[0]
    s = b.op("Relu", [b.conv(s, 24, 8, 1)])[0]
    s = b.op("HardSigmoid", [b.conv(s, 8, 24, 1)])[0]
    se = b.op("Mul", [pw, s])[0]
    # residual (fused into the conv) and a rank-4 constant
    r = b.op("Add", [b.conv(se, 24, 24, 3), se])[0]
    r = b.op("Sub", [r, b.const(b.rng.standard_normal((1, 24, 1, 1)).astype(np.float32))])[0]
    # split / concat / unfolded batchnorm
    a1, a2 = b.op("Split", [r, b.const(np.array([8, 16], np.int64))], n_out=2, axis=1)
    cat = b.op("Concat", [b.conv(a1, 8, 8, 3), a2, r], axis=1)[0]
    c = 48
    bn = b.op(
        "BatchNormalization",
        [
            cat,
            b.const((1 + 0.1 * b.rng.standard_normal(c)).astype(np.float32)),
            b.const(b.rng.standard_normal(c).astype(np.float32) * 0.1),
            b.const(b.rng.standard_normal(c).astype(np.float32) * 0.1),
            b.const((1 + b.rng.random(c)).astype(np.float32)),
        ],
        epsilon=1e-3,
    )[0]
    bn = b.op("Relu", [bn])[0]
    ap = b.op("AveragePool", [bn], kernel_shape=[2, 2], strides=[2, 2])[0]
    # the ConvNeXt / Swin pattern: to NHWC, LayerNorm over C, back
    t = b.op("Transpose", [ap], perm=[0, 2, 3, 1])[0]
    ln = b.op(
        "LayerNormalization",
        [t, b.const(np.ones(c, np.float32) * 1.5), b.const(np.full(c, 0.25, np.float32))],
        axis=-1,
    )[0]
    t2 = b.op("Transpose", [ln], perm=[0, 3, 1, 2])[0]
    feat = b.conv(t2, c, 32, 3)
    # outputs: a conv output directly, a pooled head, and an intermediate also read by
    # a reshape (both layouts of one value)
    head = b.op("Flatten", [b.op("GlobalMaxPool", [feat])[0]], axis=1)[0]
    reshaped = b.op("Reshape", [pw, b.const(np.array([0, -1], np.int64))])[0]
    dims = [batch, 3, 32, 32]
    return b.model(
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, dims)],
        [
            out(feat, 4),
            out(head, 2),
            out(reshaped, 2),
        ],
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_convnet_matches_ort_channels_last(seed: int) -> None:
    x = _rng(100 + seed).standard_normal((1, 3, 32, 32)).astype(np.float32)
    sess = compare(convnet(seed), {"X": x})
    d = layout_decision(sess)
    assert d["chosen"] == "channels_last", d
    ops = ops_of(sess)
    assert ops.count("conv_nhwc") == 8 and "conv" not in ops, ops
    # pooling and BatchNormalization followed the convolutions
    for op in ("nhwcmaxpool", "nhwcaveragepool", "nhwcglobalaveragepool", "nhwcglobalmaxpool"):
        assert op in ops, (op, ops)
    assert "batchnormalization" not in ops
    # Five Transposes between the layouts: the input, the two outputs read in NCHW
    # (the conv output, the reshaped one), and around the Add+Clip chain fused before
    # the pass, whose [W]-shaped constant is no suffix row channels-last. The model's
    # two Transposes around the LayerNorm cancelled against the layout (else 7).
    assert ", 5 Transposes between the layouts" in d["detail"], d["detail"]
    assert d["rule"] == "policy.prefer" and "as KernelPolicy(conv_nhwc) asks" in d["detail"]


def test_policy_off_oneDNN_keeps_nchw() -> None:
    x = _rng(7).standard_normal((1, 3, 32, 32)).astype(np.float32)
    kp = xrt.KernelPolicy(conv=["cpu_direct", "cpu_im2col"])
    sess = compare(convnet(3), {"X": x}, kernel_policy=kp)
    d = layout_decision(sess)
    assert d["chosen"] == "nchw" and "cpu_direct" in d["detail"], d
    assert "conv_nhwc" not in ops_of(sess)


def test_dynamic_batch_runs_at_several_shapes() -> None:
    model = convnet(4, batch="N")
    sess = None
    for n in (1, 3, 2):
        x = _rng(n).standard_normal((n, 3, 32, 32)).astype(np.float32)
        sess = compare(model, {"X": x})
    assert sess is not None and layout_decision(sess)["chosen"] == "channels_last"


def conv1d_model(seed: int) -> bytes:
    """Whisper's front end (activations simplified): Conv1d, strided Conv1d, Transpose(0, 2, 1)."""
    b = Builder(seed)
    h = b.op("Relu", [b.conv("X", 8, 16, 3, rank=1)])[0]
    h = b.op("Sigmoid", [b.conv(h, 16, 16, 3, rank=1, stride=2)])[0]
    t = b.op("Transpose", [h], perm=[0, 2, 1])[0]
    y = b.op("Add", [t, b.const(b.rng.standard_normal((16,)).astype(np.float32))])[0]
    return b.model(
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 8, 50])],
        [out(y, 3)],
    )


def test_conv1d_transpose_cancels() -> None:
    x = _rng(11).standard_normal((2, 8, 50)).astype(np.float32)
    sess = compare(conv1d_model(5), {"X": x})
    d = layout_decision(sess)
    assert d["chosen"] == "channels_last"
    assert ops_of(sess).count("conv_nhwc") == 2
    # only the input's Transpose: the model's Transpose(0, 2, 1) is the layout itself
    assert ", 1 Transposes" in d["detail"], d["detail"]


def test_conv3d_and_shape() -> None:
    b = Builder(6)
    y = b.op("Relu", [b.conv("X", 4, 8, 3, rank=3)])[0]
    shp = b.op("Shape", [y])[0]
    flat = b.op("Reshape", [y, b.const(np.array([0, 8, -1], np.int64))])[0]
    model = b.model(
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4, 6, 7, 5])],
        [
            out(y, 5),
            out(shp, 1, TensorProto.INT64),
            out(flat, 3),
        ],
    )
    x = _rng(12).standard_normal((2, 4, 6, 7, 5)).astype(np.float32)
    sess = compare(model, {"X": x})
    assert "conv_nhwc" in ops_of(sess)


def test_saved_plan_reloads_with_same_bits(tmp_path) -> None:  # type: ignore[no-untyped-def]
    x = _rng(21).standard_normal((1, 3, 32, 32)).astype(np.float32)
    sess = compare(convnet(8), {"X": x})
    path = tmp_path / "cl.plan"
    sess.save_plan(path)
    again = xrt.InferenceSession.load_plan(path, kernel_policy=ASK)
    a, b = sess.run({"X": x}), again.run({"X": x})
    for k in a:
        assert np.array_equal(np.asarray(a[k]), np.asarray(b[k])), k


def test_nan_propagates_through_fused_relu() -> None:
    b = Builder(9)
    y = b.op("Relu", [b.conv("X", 4, 8, 3)])[0]
    y = b.op(
        "Clip", [b.conv(y, 8, 8, 1), b.const(np.array(0.0, np.float32)), b.const(np.array(6.0, np.float32))]
    )[0]
    model = b.model(
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4, 8, 8])],
        [out(y, 4)],
    )
    x = _rng(13).standard_normal((1, 4, 8, 8)).astype(np.float32)
    x[0, 1, 3, 4] = np.nan
    sess = xrt.InferenceSession(model, device="cpu", engine="native", kernel_policy=ASK)
    assert "conv_nhwc" in ops_of(sess)
    res = np.asarray(sess.run({"X": x})[y])
    # the NaN reaches the 3x3 neighbourhood of (3, 4) through the first conv, then
    # every channel at those pixels through the 1x1 conv
    assert np.isnan(res[0, :, 2:5, 3:6]).all()
    assert not np.isnan(res[0, :, 0, 0]).any()


def chain(depth: int) -> bytes:
    """A deep stack of 3x3 convolutions with ReLU on 32 channels."""
    b = Builder(30)
    h = b.conv("X", 3, 32, 3)
    for _ in range(depth):
        h = b.op("Relu", [b.conv(h, 32, 32, 3)])[0]
    return b.model([helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 24, 24])], [out(h, 4)])


def test_default_policy_weighs_the_transposes() -> None:
    x = _rng(31).standard_normal((1, 3, 24, 24)).astype(np.float32)
    deep = compare(chain(6), {"X": x}, kernel_policy=None)
    d = layout_decision(deep)
    assert (d["chosen"], d["rule"]) == ("channels_last", "default"), d
    assert "elements moved vs" in d["detail"]
    lone = compare(chain(0), {"X": x}, kernel_policy=None)
    d = layout_decision(lone)
    assert d["chosen"] == "nchw" and "cost more than they save" in d["detail"], d
    assert "conv" in ops_of(lone) and "conv_nhwc" not in ops_of(lone)


def silu_model(shared: bool) -> bytes:
    """Conv -> SiLU (Sigmoid, Mul) twice; with ``shared`` the first conv's output is
    also read by an Add, so its SiLU cannot fold into the convolution (and the second
    SiLU fuses with that Add into one elementwise chain, which does not fold either)."""
    b = Builder(40)
    c1 = b.conv("X", 8, 16, 3)
    h = b.op("Mul", [c1, b.op("Sigmoid", [c1])[0]])[0]
    c2 = b.conv(h, 16, 16, 3, group=16)
    y = b.op("Mul", [b.op("Sigmoid", [c2])[0], c2])[0]
    if shared:
        y = b.op("Add", [y, c1])[0]
    y = b.conv(y, 16, 8, 1)
    return b.model([helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 8, 20, 20])], [out(y, 4)])


@pytest.mark.parametrize("shared", [False, True])
def test_silu_folds_into_the_convolution(shared: bool, tmp_path) -> None:  # type: ignore[no-untyped-def]
    x = _rng(41).standard_normal((1, 8, 20, 20)).astype(np.float32)
    sess = compare(silu_model(shared), {"X": x})
    d = layout_decision(sess)
    assert f"({0 if shared else 2} SiLU fused into them)" in d["detail"], d["detail"]
    fused_steps = [s for s in sess.plan.steps if s["op_type"] == "FusedElementwise"]
    assert len(fused_steps) == (2 if shared else 0)
    sess.save_plan(tmp_path / "silu.plan")
    again = xrt.InferenceSession.load_plan(tmp_path / "silu.plan", kernel_policy=ASK)
    (a,), (b,) = sess.run({"X": x}).values(), again.run({"X": x}).values()
    assert np.array_equal(np.asarray(a), np.asarray(b))
    # NaN keeps propagating through the folded SiLU (oneDNN's swish: no max/min)
    x[0, 3, 10, 10] = np.nan
    (res,) = sess.run({"X": x}).values()
    assert np.isnan(np.asarray(res)[0, :, 9:12, 9:12]).all()


def shufflenet_unit(seed: int, extra_output: bool = False, keepdims: int = 0) -> bytes:
    """ShuffleNetV2's unit: Concat, channel shuffle (Reshape, Transpose, Reshape), the
    channel split as two Slices, and a ReduceMean over H, W as the head."""
    b = Builder(seed)
    c1 = b.op("Relu", [b.conv("X", 3, 16, 3, stride=2)])[0]
    cat = b.op("Concat", [c1, b.op("Relu", [b.conv(c1, 16, 16, 1)])[0]], axis=1)[0]
    g = b.op("Reshape", [cat, b.const(np.array([1, 2, 16, 16, 16], np.int64))])[0]
    t = b.op("Transpose", [g], perm=[0, 2, 1, 3, 4])[0]
    shuffled = b.op("Reshape", [t, b.const(np.array([1, 32, 16, 16], np.int64))])[0]
    i64 = lambda *v: b.const(np.array(v, np.int64))  # noqa: E731
    left = b.op("Slice", [shuffled, i64(0), i64(16), i64(1)])[0]
    right = b.op("Slice", [shuffled, i64(16), i64(32), i64(-3), i64(1)])[0]
    joined = b.op("Concat", [left, b.conv(right, 16, 16, 3)], axis=1)[0]
    head = b.op("ReduceMean", [b.conv(joined, 32, 24, 1)], axes=[2, 3], keepdims=keepdims)[0]
    outputs = [out(head, 2 if keepdims == 0 else 4)]
    if extra_output:
        outputs.append(out(t, 5))
    return b.model([helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 32, 32])], outputs)


@pytest.mark.parametrize("keepdims", [0, 1])
def test_channel_shuffle_slices_and_reduce_stay_channels_last(keepdims: int) -> None:
    model = shufflenet_unit(21, keepdims=keepdims)
    for seed in (1, 2):
        sess = compare(model, {"X": _rng(seed).standard_normal((1, 3, 32, 32)).astype(np.float32)})
    d = layout_decision(sess)
    # One Transpose into channels-last (the image), none back out for the flat head;
    # with keepdims the [1, 1, 1, C] result goes back as a free Reshape.
    assert "1 Transposes between the layouts" in d["detail"], d["detail"]
    steps = sess.plan.steps
    transposes = [s["name"] for s in steps if s["op_type"] == "Transpose"]
    assert len(transposes) == 2 and transposes[0] == "X_to_nhwc", transposes  # image, shuffle
    assert transposes[1].endswith("_nhwc")  # the shuffle, rewritten channels-last
    assert sum(s["op_type"] == "Slice" for s in steps) == 2


def test_channel_shuffle_read_elsewhere_stays_nchw() -> None:
    model = shufflenet_unit(22, extra_output=True)
    sess = compare(model, {"X": _rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)})
    transposes = [s["name"] for s in sess.plan.steps if s["op_type"] == "Transpose"]
    # The model's own 5-D Transpose runs as written (its input is returned too).
    assert any(t.startswith("Transpose_") and not t.endswith("_nhwc") for t in transposes), transposes


@pytest.mark.parametrize(
    "kernel,stride,pad,act,residual",
    [
        (3, 2, 0, "Gelu", False),  # Wav2Vec2's layers: two GEMMs, the second accumulating
        (2, 2, 0, "Relu", False),  # kernel = stride: one plain GEMM
        (3, 1, 1, None, True),  # Whisper-like, padded, with a fused residual
        (5, 2, 2, "Sigmoid", False),  # three chunks, padding on both sides
        (4, 3, 1, None, False),  # taps not a multiple of the stride
    ],
)
def test_wide_conv1d_runs_as_gemms_on_the_activations(
    kernel: int, stride: int, pad: int, act: str | None, residual: bool
) -> None:
    """A channels-last Conv1d with >= 256 input channels and constant weights runs as
    GEMMs over strided views of the input (onednn_conv1d_gemm.h)."""
    b = Builder(30 + kernel + stride)
    c = 256
    y = b.conv("X", c, c, 1, rank=1)  # into channels-last
    w = b.const(_w(b.rng, c, c, kernel))
    ins = [y, w, b.const(b.rng.standard_normal(c).astype(np.float32) * 0.1)]
    z = b.op("Conv", ins, kernel_shape=[kernel], strides=[stride], pads=[pad, pad])[0]
    if residual:
        z = b.op("Add", [z, y])[0]
    if act == "Gelu":  # the decomposed erf form torch exports below opset 20
        h = b.op("Div", [z, b.const(np.array(np.sqrt(2.0), np.float32))])[0]
        h = b.op("Add", [b.op("Erf", [h])[0], b.const(np.array(1.0, np.float32))])[0]
        z = b.op("Mul", [b.op("Mul", [z, h])[0], b.const(np.array(0.5, np.float32))])[0]
    elif act:
        z = b.op(act, [z])[0]
    z = b.conv(z, c, 64, 1, rank=1)
    model = b.model([helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, c, 50])], [out(z, 3)])
    for seed in (1, 2):
        sess = compare(model, {"X": _rng(seed).standard_normal((2, c, 50)).astype(np.float32)})
    assert [s["op_type"] for s in sess.plan.steps].count("NhwcConv") == 3


def poolformer_block(seed: int, extra_output: bool = False) -> bytes:
    """PoolFormer's block as timm exports it: GroupNorm(1 group) as Reshape [N, 1, -1],
    InstanceNormalization with one scale, Reshape back, a per-channel Mul and Add over
    [C, 1, 1]; the pooling mixer AveragePool(x) - x, a layer scale and the residual; a
    1x1-conv MLP with the same norm before it."""
    b = Builder(seed)
    c = 16
    x = b.conv("X", 3, c, 3, stride=2)

    def group_norm(v: str) -> str:
        flat = b.op("Reshape", [v, b.const(np.array([1, 1, -1], np.int64))])[0]
        one = np.ones(1, np.float32)
        normed = b.op("InstanceNormalization", [flat, b.const(one), b.const(0 * one)], epsilon=1e-5)[0]
        back = b.op("Reshape", [normed, b.const(np.array([1, c, 16, 16], np.int64))])[0]
        gamma = b.const((1 + 0.2 * b.rng.standard_normal((c, 1, 1))).astype(np.float32))
        beta = b.const((0.2 * b.rng.standard_normal((c, 1, 1))).astype(np.float32))
        return b.op("Add", [b.op("Mul", [back, gamma])[0], beta])[0]

    n1 = group_norm(x)
    pooled = b.op("AveragePool", [n1], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0)[0]
    mixed = b.op("Sub", [pooled, n1])[0]
    scale = b.const((0.5 * b.rng.standard_normal((c, 1, 1))).astype(np.float32))
    x = b.op("Add", [x, b.op("Mul", [mixed, scale])[0]])[0]
    hidden = b.op("Relu", [b.conv(group_norm(x), c, 2 * c, 1)])[0]
    y = b.op("Add", [x, b.conv(hidden, 2 * c, c, 1)])[0]
    outputs = [out(y, 4)] + ([out(n1, 4)] if extra_output else [])
    return b.model([helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 32, 32])], outputs)


@pytest.mark.parametrize("extra_output", [False, True])
def test_whole_sample_group_norm_and_pooling_stay_channels_last(extra_output: bool) -> None:
    model = poolformer_block(31, extra_output)
    for seed in (4, 5):
        sess = compare(model, {"X": _rng(seed).standard_normal((1, 3, 32, 32)).astype(np.float32)})
    steps = sess.plan.steps
    norms = [s["name"] for s in steps if s["op_type"] == "InstanceNormalization"]
    assert len(norms) == 2 and all(n.endswith("_nhwc") for n in norms), norms
    assert any(s["op_type"] == "NhwcAveragePool" for s in steps), [s["op_type"] for s in steps]
    transposes = [s["name"] for s in steps if s["op_type"] == "Transpose"]
    # The image in and the block's output back; a norm output that is also a graph
    # output goes back once more (it is still computed channels-last).
    assert len(transposes) == (3 if extra_output else 2), transposes


def test_cuda_preview_fuses_nchw_per_channel_chains_the_cpu_leaves_apart() -> None:
    """CUDA's fused kernel broadcasts operands by numpy's rules, so a Mul and an Add by
    [C, 1, 1] constants on an NCHW value fuse there; the CPU's reads suffix rows only
    and keeps them apart (and still matches ORT)."""
    b = Builder(41)
    x = b.op("Relu", ["X"])[0]
    gamma = b.const(b.rng.standard_normal((8, 1, 1)).astype(np.float32))
    beta = b.const(b.rng.standard_normal((8, 1, 1)).astype(np.float32))
    y = b.op("Sigmoid", [b.op("Add", [b.op("Mul", [x, gamma])[0], beta])[0]])[0]
    model = b.model([helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 8, 5, 6])], [out(y, 4)])
    pv = xrt.preview_plan(model, device="cuda", target="sm_90")
    fused = [s for s in pv.steps if s["op_type"] == "FusedElementwise"]
    assert len(fused) == 1 and pv.launches() == 1, pv.summary()
    sess = compare(model, {"X": _rng(6).standard_normal((2, 8, 5, 6)).astype(np.float32)})
    cpu_ops = [s["op_type"] for s in sess.plan.steps]
    assert "Mul" in cpu_ops and "Add" in cpu_ops, cpu_ops


@pytest.mark.parametrize("act", ["HardSwish", "Gelu"])
def test_activation_fuses_into_the_depthwise_conv_through_the_token_view(act: str) -> None:
    """PVT's MLP shape: fc1 tokens viewed as an image, a depthwise conv, flattened back
    to tokens (Reshape, Transpose), an activation. After the layout pass the flattening
    is one view, and the activation fuses into the channels-last depthwise convolution;
    PVT's own GELU is left to its kernel (slower as the depthwise epilogue)."""
    b = Builder(51)
    c = 32
    x = b.conv("X", c, c, 1)
    dw = b.conv(x, c, c, 3, group=c)
    flat = b.op("Reshape", [dw, b.const(np.array([2, c, -1], np.int64))])[0]
    tokens = b.op("Transpose", [flat], perm=[0, 2, 1])[0]
    y = b.op(act, [tokens])[0]
    g = helper.make_graph(
        b.nodes,
        "pvt_mlp",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, c, 8, 8])],
        [out(y, 3)],
        b.inits,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString()
    pv = xrt.preview_plan(model, device="cuda", target="sm_90")
    ops_run = [s["op_type"] for s in pv.steps if not s["view"]]
    (dw_step,) = [s for s in pv.steps if s["kernel"] == "cuda_depthwise"]
    fused = act != "Gelu"
    assert (act not in ops_run) == fused and "Transpose" in ops_run, pv.summary()
    assert dw_step["activation"] == (act if fused else ""), dw_step
    compare(model, {"X": _rng(7).standard_normal((2, c, 8, 8)).astype(np.float32)})


@pytest.mark.parametrize("act", ["Relu", "Sigmoid", "HardSigmoid"])
def test_squeeze_excitation_convs_run_as_gemms_on_cuda(act: str) -> None:
    """A squeeze-excitation block: global pooling to one pixel, then 1x1 convolutions
    on it. On CUDA the compiler runs them as MatMuls (bias fused; the activation fused
    where the GEMM kernel applies it), not where a policy names convolution kernels; on
    the CPU (oneDNN's 1x1 convolution is as fast) they stay convolutions, and match ORT."""
    b = Builder(61)
    c, s = 32, 8
    x = b.op("Relu", [b.conv("X", 3, c, 3)])[0]
    pooled = b.op("GlobalAveragePool", [x])[0]
    squeezed = b.op(act, [b.conv(pooled, c, s, 1)])[0]
    gate = b.op("Sigmoid", [b.conv(squeezed, s, c, 1)])[0]
    y = b.op("Mul", [x, gate])[0]
    model = b.model([helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 3, 12, 12])], [out(y, 4)])
    fp16 = xrt.ExecutionPolicy(precision="fp16")
    pv = xrt.preview_plan(model, device="cuda", target="sm_90", exec_policy=fp16)
    convs = [s for s in pv.steps if s["op_type"] in ("Conv", "NhwcConv")]
    assert len(convs) == 1, pv.summary()  # the image's 3x3 only
    assert [s["op_type"] for s in pv.steps].count("MatMul") == 2, pv.summary()
    assert "single-pixel 1x1 convolutions as GEMMs (convolutions converted): 2" in pv.summary()
    named = xrt.preview_plan(
        model,
        device="cuda",
        target="sm_90",
        exec_policy=fp16,
        kernel_policy=xrt.KernelPolicy(conv_nhwc="cudnn"),
    )
    assert [s["op_type"] for s in named.steps].count("MatMul") == 0, named.summary()
    for seed in (8, 9):
        sess = compare(
            model,
            {"X": _rng(seed).standard_normal((3, 3, 12, 12)).astype(np.float32)},
            kernel_policy=xrt.KernelPolicy(),
        )
    assert [s["op_type"] for s in sess.plan.steps].count("MatMul") == 0, sess.plan.summary()


def test_cpu_keeps_the_suffix_part_of_a_chain_its_kernel_reads() -> None:
    """Relu, Add of a [W] row, Mul of a [C, 1, 1] column: the whole chain fuses on CUDA;
    the CPU's fused kernel refuses the column, so there the chain stops before it (Relu
    and Add fused, the Mul on its own) instead of not fusing at all."""
    b = Builder(42)
    row = b.const(b.rng.standard_normal(6).astype(np.float32))
    col = b.const(b.rng.standard_normal((8, 1, 1)).astype(np.float32))
    y = b.op("Mul", [b.op("Add", [b.op("Relu", ["X"])[0], row])[0], col])[0]
    model = b.model([helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 8, 5, 6])], [out(y, 4)])
    pv = xrt.preview_plan(model, device="cuda", target="sm_90")
    assert [s["op_type"] for s in pv.steps] == ["FusedElementwise"], pv.summary()
    sess = compare(model, {"X": _rng(11).standard_normal((2, 8, 5, 6)).astype(np.float32)})
    assert [s["op_type"] for s in sess.plan.steps] == ["FusedElementwise", "Mul"], sess.plan.summary()
