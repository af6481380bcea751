"""Conv kernel ``onednn`` (oneDNN's convolution) in the native engine.

Random 1-D/2-D/3-D convolutions (groups, depthwise, strides, dilations, asymmetric
pads, bias, the fused residual and activations) pinned to ``onednn`` against a
NumPy float64 reference (tolerance: 1e-4 relative to the output's magnitude); the
choice is recorded in the session's decisions; a dynamic-shape model runs at
several shapes; each case runs both ways: the model's NCHW Conv pinned to ``onednn``
(reorders around the primitive) and, with ``conv_nhwc="onednn"``, the channels-last
layout pass's NhwcConv on the same kernel; pinning works both ways; a float64 Conv pinned to ``onednn`` with
``mode="require"`` raises a typed error naming the kernel and the reason. Skips,
saying why, when the build has no oneDNN (the kernel then reports
``backend_unavailable``, which is checked).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper

ACTS = [None, "Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Clip"]
RTOL = 1e-4


def ref_conv(x, w, b, strides, pads, dil, group):  # type: ignore[no-untyped-def]
    """N-d convolution in float64 (pads: begins then ends, ONNX order)."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    r = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + r]) for i in range(r)])
    ks = w.shape[2:]
    out = [(xp.shape[2 + i] - (ks[i] - 1) * dil[i] - 1) // strides[i] + 1 for i in range(r)]
    n, c, m = x.shape[0], x.shape[1], w.shape[0]
    cg, mg = c // group, m // group
    y = np.zeros((n, m, *out))
    for tap in itertools.product(*[range(k) for k in ks]):
        sl = tuple(
            slice(tap[i] * dil[i], tap[i] * dil[i] + (out[i] - 1) * strides[i] + 1, strides[i])
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
    """The activation in float64 (ONNX defaults; Clip to [-0.5, 0.75])."""
    if kind is None:
        return y
    return {
        "Relu": lambda: np.maximum(y, 0),
        "LeakyRelu": lambda: np.where(y >= 0, y, 0.01 * y),
        "Sigmoid": lambda: 1 / (1 + np.exp(-y)),
        "Tanh": lambda: np.tanh(y),
        "HardSigmoid": lambda: np.clip(0.2 * y + 0.5, 0, 1),
        "HardSwish": lambda: y * np.clip(y / 6 + 0.5, 0, 1),
        "Clip": lambda: np.clip(y, -0.5, 0.75),
    }[kind]()


def conv_model(x_shape, w, b, strides, pads, dil, group, act, residual, y_shape, dtype=TensorProto.FLOAT):  # type: ignore[no-untyped-def]
    """Conv (+ Add of input R) (+ activation): the compiler fuses them into one node."""
    inits = [numpy_helper.from_array(w, "W")]
    ins = ["X", "W"]
    if b is not None:
        inits.append(numpy_helper.from_array(b, "B"))
        ins.append("B")
    attrs = {
        "strides": strides,
        "pads": pads,
        "dilations": dil,
        "group": group,
        "kernel_shape": list(w.shape[2:]),
    }
    nodes = [helper.make_node("Conv", ins, ["c"], name="conv", **attrs)]
    inputs = [helper.make_tensor_value_info("X", dtype, list(x_shape))]
    cur = "c"
    if residual:
        nodes.append(helper.make_node("Add", [cur, "R"], ["s"], name="add"))
        inputs.append(helper.make_tensor_value_info("R", dtype, list(y_shape)))
        cur = "s"
    if act == "Clip":
        lo, hi = np.array(-0.5, w.dtype), np.array(0.75, w.dtype)
        inits += [numpy_helper.from_array(lo, "lo"), numpy_helper.from_array(hi, "hi")]
        nodes.append(helper.make_node("Clip", [cur, "lo", "hi"], ["Y"], name="act"))
    elif act is not None:
        nodes.append(helper.make_node(act, [cur], ["Y"], name="act"))
    else:
        nodes.append(helper.make_node("Identity", [cur], ["Y"], name="out"))
    graph = helper.make_graph(
        nodes, "conv", inputs, [helper.make_tensor_value_info("Y", dtype, list(y_shape))], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


LAYOUTS = ["nchw", "channels_last"]


def session(model: bytes, conv: str, mode: str = "require", layout: str = "nchw") -> xrt.InferenceSession:
    kp = xrt.KernelPolicy(conv=conv, mode=mode)
    if layout == "channels_last":
        kp = xrt.KernelPolicy(conv=conv, conv_nhwc="onednn", mode=mode)
    return xrt.InferenceSession(model, device="cpu", engine="native", kernel_policy=kp)


def _onednn_missing() -> str:
    """Empty when the build has oneDNN; else why not (and the kernel says so)."""
    w = np.ones((2, 1, 1, 1), np.float32)
    model = conv_model((1, 1, 2, 2), w, None, [1, 1], [0] * 4, [1, 1], 1, None, False, [1, 2, 2, 2])
    (d,) = session(model, "onednn", mode="prefer").explain().filter(op="conv")
    if d.chosen == "onednn":
        return ""
    c = d.candidate("onednn")
    assert c.reason_code == "backend_unavailable", (c.reason_code, c.detail)
    return c.detail


MISSING = _onednn_missing()
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"onednn kernel unavailable: {MISSING}")


def run_case(x_shape, w_shape, strides, pads, dil, group, act, residual, bias, seed, layout="nchw"):  # type: ignore[no-untyped-def]
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
    model = conv_model(x_shape, w, b, strides, pads, dil, group, act, residual, y.shape)
    if layout == "channels_last":
        # Channels-last needs no reorder, so NhwcConv takes 1×1 output planes too.
        sess = session(model, "onednn", layout=layout)
        step = next(s for s in sess.plan.steps if s["op_type"] == "NhwcConv")
        assert step["kernel"] == "onednn"
        (d,) = sess.explain().filter(op="conv_nhwc")
        assert (d.chosen, d.rule) == ("onednn", "policy.require")
        assert not sess.explain().filter(op="conv")
    elif np.prod(y.shape[2:]) <= 1:
        # A 1×1 output plane is a GEMV: onednn refuses it with its reason, and in
        # prefer mode another kernel runs it.
        with pytest.raises(xrt.UnsupportedOperationError, match="1×1 output plane"):
            session(model, "onednn")
        sess = session(model, "onednn", mode="prefer")
        (d,) = sess.explain().filter(op="conv")
        assert d.chosen != "onednn" and d.candidate("onednn").reason_code == "shape_unsupported"
    else:
        sess = session(model, "onednn")
        step = next(s for s in sess.plan.steps if s["op_type"] == "Conv")
        assert step["kernel"] == "onednn"
        (d,) = sess.explain().filter(op="conv")
        assert (d.chosen, d.rule) == ("onednn", "policy.require")
    out = sess.run(feeds)["Y"]
    assert out.shape == y.shape
    err = np.abs(out - y).max() / max(1.0, np.abs(y).max())
    assert err <= RTOL, (x_shape, w_shape, strides, pads, dil, group, act, residual, err)


def random_case(rng: np.random.Generator, rank: int, i: int):  # type: ignore[no-untyped-def]
    group = [1, int(rng.integers(2, 4)), 0][i % 3]  # 0: depthwise
    cg = 1 if group == 0 else int(rng.integers(1, 6))
    c = int(rng.integers(2, 9)) if group == 0 else cg * group
    mg = int(rng.integers(1, 3)) if group == 0 else int(rng.integers(1, 7))
    group = c if group == 0 else group
    ks = [int(rng.integers(1, 6 if rank < 3 else 4)) for _ in range(rank)]
    s = [int(rng.integers(1, 4)) for _ in range(rank)]
    d = [int(rng.integers(1, 3)) for _ in range(rank)]
    sp = [(ks[j] - 1) * d[j] + int(rng.integers(1, 14 if rank < 3 else 6)) for j in range(rank)]
    pads = [int(rng.integers(0, 3)) for _ in range(2 * rank)]
    return (int(rng.integers(1, 3)), c, *sp), (group * mg, c // group, *ks), s, pads, d, group


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("i", range(8))
def test_random_convolutions_match_float64(rank: int, i: int, layout: str) -> None:
    rng = np.random.default_rng(1000 * rank + i)
    xs, ws, s, pads, d, group = random_case(rng, rank, i)
    act = ACTS[(i + rank) % len(ACTS)]
    run_case(xs, ws, s, pads, d, group, act, residual=i % 3 == 1, bias=i % 4 != 3, seed=i, layout=layout)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("act", ACTS)
def test_every_fused_activation_with_residual(act: str | None, layout: str) -> None:
    run_case((1, 16, 14, 14), (32, 16, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 1, act, True, True, 3, layout)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_network_sized_layers(layout: str) -> None:
    # Blocked (direct) oneDNN paths with reorders in and out; a 1x1 and a depthwise.
    cases = [
        ((1, 64, 28, 28), (64, 64, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 1, "Relu", True, True, 5),
        ((1, 3, 64, 64), (32, 3, 7, 7), [2, 2], [3, 3, 3, 3], [1, 1], 1, "Relu", False, True, 6),
        ((1, 96, 28, 28), (24, 96, 1, 1), [1, 1], [0] * 4, [1, 1], 1, None, True, True, 7),
        ((1, 96, 28, 28), (96, 1, 5, 5), [2, 2], [2, 2, 2, 2], [1, 1], 96, "HardSwish", False, True, 8),
    ]
    for c in cases:
        run_case(*c, layout=layout)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("pads", [[2, 0, 0, 0], [0, 2, 2, 1]])
def test_residual_and_bias_where_windows_see_only_padding(pads: list[int], layout: str) -> None:
    # Kernel height 1 with padding: whole output rows see only padding (oneDNN 2.6's
    # blocked path dropped the residual there when a bias was fused too; channels-last
    # adds the residual after the primitive there).
    run_case((2, 2, 9, 11), (5, 2, 1, 4), [1, 2], pads, [2, 2], 1, None, True, True, 1, layout)
    run_case((2, 2, 9, 11), (5, 2, 1, 4), [1, 2], pads, [2, 2], 1, "Relu", True, True, 2, layout)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_dynamic_shapes_build_a_primitive_per_shape(layout: str) -> None:
    rng = np.random.default_rng(11)
    w = (rng.standard_normal((8, 4, 3, 3)) / 6).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    model = conv_model(
        ("N", 4, "H", "W"), w, b, [1, 1], [1] * 4, [1, 1], 1, "Relu", False, ("N", 8, "H", "W")
    )
    sess = session(model, "onednn", layout=layout)
    for shape in [(1, 4, 9, 9), (2, 4, 16, 12), (1, 4, 9, 9)]:
        x = rng.standard_normal(shape).astype(np.float32)
        y = act_ref("Relu", ref_conv(x, w, b, [1, 1], [1] * 4, [1, 1], 1))
        out = sess.run({"X": x})["Y"]
        assert np.abs(out - y).max() <= RTOL * max(1.0, np.abs(y).max()), shape
    op = "conv_nhwc" if layout == "channels_last" else "conv"
    assert any(d.chosen == "onednn" for d in sess.explain().filter(op=op))


def test_pinning_works_both_ways() -> None:
    w = np.random.default_rng(2).standard_normal((8, 4, 3, 3)).astype(np.float32)
    model = conv_model((1, 4, 12, 12), w, None, [1, 1], [1] * 4, [1, 1], 1, "Relu", False, [1, 8, 12, 12])
    x = np.random.default_rng(3).standard_normal((1, 4, 12, 12)).astype(np.float32)
    outs = {}
    for conv in ["onednn", "cpu_direct", "cpu_im2col"]:
        sess = session(model, conv, mode="prefer")
        (d,) = sess.explain().filter(op="conv")
        if conv == "cpu_direct" and d.chosen != conv:
            continue  # a CPU without AVX2/FMA: cpu_direct says why and another kernel runs
        assert d.chosen == conv
        outs[conv] = sess.run({"X": x})["Y"]
    ref = outs["cpu_im2col"]
    for conv, out in outs.items():
        assert np.abs(out - ref).max() <= RTOL * np.abs(ref).max(), conv


def test_float64_conv_pinned_to_onednn_raises_a_typed_error() -> None:
    w = np.ones((2, 2, 3, 3), np.float64)
    model = conv_model(
        (1, 2, 5, 5), w, None, [1, 1], [0] * 4, [1, 1], 1, None, False, [1, 2, 3, 3], TensorProto.DOUBLE
    )
    with pytest.raises(xrt.UnsupportedOperationError, match=r"(?s)conv.*onednn.*float64"):
        session(model, "onednn", mode="require")
    # prefer: another kernel runs it, and the decision says why onednn did not.
    sess = session(model, "onednn", mode="prefer")
    (d,) = sess.explain().filter(op="conv")
    assert d.chosen != "onednn" and d.candidate("onednn").reason_code == "dtype_unsupported"
    x = np.ones((1, 2, 5, 5))
    assert np.allclose(sess.run({"X": x})["Y"], 18.0)
