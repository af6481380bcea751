"""Channels-last pools of domain "xrt" on the native CPU engine (issue 18).

``NhwcMaxPool``, ``NhwcAveragePool``, ``NhwcGlobalAveragePool`` and ``NhwcGlobalMaxPool`` take
[N, D1.., C] and must equal the ONNX pool applied to the input transposed to [N, C, D1..], then
transposed back. References: a NumPy float64 implementation of the ONNX semantics (every case),
our own NCHW pools (the ops the layout pass replaces), and torch's pools where they apply.
Also: NaN propagation, dynamic shapes, the dispatcher's choice (``cpu_nhwc``) and typed errors.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
import xpuruntime as xrt
from onnx import TensorProto, helper

F = TensorProto.FLOAT
RNG = np.random.default_rng(18)


# ------------------------------------------------------------------ models and sessions
def _model(
    op: str,
    x_shape: list[Any],
    y_rank: int,
    attrs: dict[str, Any],
    *,
    nhwc: bool = True,
    outputs: int = 1,
    dtype: int = F,
) -> bytes:
    """One pool node on input x (domain xrt when nhwc), outputs of rank y_rank with symbolic dims."""
    names = ["y", "i"][:outputs]
    node = helper.make_node(op, ["x"], names, name="pool", domain="xrt" if nhwc else "", **attrs)
    outs = [
        helper.make_tensor_value_info(
            n, dtype if n == "y" else TensorProto.INT64, [f"{n}{j}" for j in range(y_rank)]
        )
        for n in names
    ]
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", dtype, x_shape)], outs)
    opsets = [helper.make_opsetid("", 20)] + ([helper.make_opsetid("xrt", 1)] if nhwc else [])
    return helper.make_model(g, opset_imports=opsets).SerializeToString()


def _session(model: bytes) -> Any:
    return xrt.InferenceSession(model, engine="native", device="cpu")


def _run_nhwc(op: str, x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    return _session(_model("Nhwc" + op, list(x.shape), x.ndim, attrs)).run({"x": x})["y"]


def _to_nchw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(x, -1, 1))


def _to_nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(x, 1, -1))


# ------------------------------------------------------------------ float64 reference
def _geometry(in_sizes: list[int], attrs: dict[str, Any]) -> tuple[list[int], list[int], list[int]]:
    """ONNX pool output sizes and begin/end pads per spatial dimension."""
    r = len(in_sizes)
    k = attrs["kernel_shape"]
    s = attrs.get("strides", [1] * r)
    d = attrs.get("dilations", [1] * r)
    pads = attrs.get("pads", [0] * (2 * r))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    ceil_mode = attrs.get("ceil_mode", 0)
    out, pb, pe = [], [], []
    for i, n in enumerate(in_sizes):
        ek = (k[i] - 1) * d[i] + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = math.ceil(n / s[i])
            total = max(0, (o - 1) * s[i] + ek - n)
            b = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            out.append(o), pb.append(b), pe.append(total - b)
            continue
        b, e = (0, 0) if auto_pad == "VALID" else (pads[i], pads[i + r])
        span = n + b + e - ek
        o = (math.ceil(span / s[i]) if ceil_mode else span // s[i]) + 1
        if ceil_mode and (o - 1) * s[i] >= n + b:  # the last window must start inside input or pad
            o -= 1
        out.append(o), pb.append(b), pe.append(e)
    return out, pb, pe


def _reference(op: str, x_nhwc: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """ONNX MaxPool/AveragePool on the NCHW transpose, in float64, transposed back."""
    x = np.moveaxis(x_nhwc.astype(np.float64), -1, 1)
    in_sizes = list(x.shape[2:])
    r = len(in_sizes)
    k = attrs["kernel_shape"]
    s = attrs.get("strides", [1] * r)
    d = attrs.get("dilations", [1] * r)
    out, pb, pe = _geometry(in_sizes, attrs)
    y = np.empty(x.shape[:2] + tuple(out))
    for o in itertools.product(*[range(n) for n in out]):
        pos = [[o[i] * s[i] - pb[i] + j * d[i] for j in range(k[i])] for i in range(r)]
        valid = [[p for p in pos[i] if 0 <= p < in_sizes[i]] for i in range(r)]
        padded = math.prod(sum(p < in_sizes[i] + pe[i] for p in pos[i]) for i in range(r))
        window = x[(slice(None), slice(None)) + np.ix_(*valid)].reshape(x.shape[:2] + (-1,))
        if op == "MaxPool":
            y[(...,) + o] = window.max(axis=-1) if window.shape[-1] else -np.inf
        else:
            div = padded if attrs.get("count_include_pad", 0) else window.shape[-1]
            y[(...,) + o] = window.sum(axis=-1) / div if div else 0.0
    return np.moveaxis(y, 1, -1)


def _assert_close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """Same shape, NaN exactly where the reference has NaN, infinities equal, the rest close."""
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg="NaN positions differ")
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf])
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=rtol, atol=atol)


# ------------------------------------------------------------------ geometries
# (channels-last input shape, attributes); each runs as NhwcMaxPool and as NhwcAveragePool
# (with count_include_pad 0 and 1 where there is padding).
CASES: list[tuple[list[int], dict[str, Any]]] = [
    ([1, 20, 20, 64], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # ResNet stem
    ([1, 16, 16, 128], {"kernel_shape": [2, 2], "strides": [2, 2]}),  # DenseNet transition
    ([3, 13, 13, 17], {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),  # SqueezeNet
    ([1, 9, 11, 17], {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER"}),
    ([2, 10, 9, 3], {"kernel_shape": [4, 3], "strides": [2, 3], "auto_pad": "SAME_LOWER"}),
    ([1, 12, 12, 17], {"kernel_shape": [3, 3], "strides": [1, 2], "dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ([2, 15, 14, 20], {"kernel_shape": [7, 5], "strides": [3, 2], "pads": [3, 1, 0, 2], "ceil_mode": 1}),
    (
        [1, 11, 10, 33],
        {
            "kernel_shape": [5, 5],
            "strides": [2, 2],
            "pads": [2, 2, 2, 2],
            "dilations": [2, 1],
            "ceil_mode": 1,
        },
    ),
    ([1, 3, 3, 1280], {"kernel_shape": [1, 1]}),
    ([1, 7, 7, 1280], {"kernel_shape": [7, 7]}),
    ([3, 8, 8, 1], {"kernel_shape": [2, 2], "strides": [1, 1], "pads": [0, 0, 1, 1]}),
    ([1, 9, 7, 80], {"kernel_shape": [3, 2], "auto_pad": "VALID", "strides": [2, 2], "ceil_mode": 1}),
    ([1, 6, 6, 16], {"kernel_shape": [6, 6], "pads": [5, 5, 5, 5], "strides": [5, 5]}),
    ([1, 4, 4, 16], {"kernel_shape": [2, 2], "pads": [3, 3, 3, 3], "strides": [2, 2]}),  # windows all in pads
    ([3, 11, 17], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),  # 1-D
    ([2, 20, 5], {"kernel_shape": [4], "dilations": [3], "ceil_mode": 1, "strides": [3]}),
    ([2, 5, 6, 7, 17], {"kernel_shape": [2, 3, 3], "strides": [1, 2, 2], "pads": [0, 1, 1, 1, 0, 1]}),  # 3-D
    (
        [1, 6, 7, 5, 64],
        {"kernel_shape": [3, 3, 2], "strides": [2, 2, 2], "dilations": [1, 2, 1], "ceil_mode": 1},
    ),
    ([1, 4, 5, 6, 3], {"kernel_shape": [3, 3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 1, 2]}),
]


def _pool_params() -> list[Any]:
    params = []
    for i, (shape, attrs) in enumerate(CASES):
        params.append(pytest.param("MaxPool", shape, attrs, id=f"max{i}"))
        params.append(pytest.param("AveragePool", shape, attrs, id=f"avg{i}"))
        if (
            any(attrs.get("pads", []))
            or attrs.get("auto_pad", "NOTSET").startswith("SAME")
            or attrs.get("ceil_mode")
        ):
            params.append(
                pytest.param("AveragePool", shape, {**attrs, "count_include_pad": 1}, id=f"avg{i}_incl")
            )
    return params


@pytest.mark.parametrize("op,shape,attrs", _pool_params())
def test_pool_matches_onnx_semantics_on_the_transpose(
    op: str, shape: list[int], attrs: dict[str, Any]
) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    got = _run_nhwc(op, x, attrs)
    want = _reference(op, x, attrs)
    _assert_close(got, want)
    # The NCHW op the layout pass replaces gives the same result.
    nchw = _session(_model(op, list(_to_nchw(x).shape), x.ndim, attrs, nhwc=False)).run({"x": _to_nchw(x)})[
        "y"
    ]
    _assert_close(got, _to_nhwc(nchw).astype(np.float64))


def _random_case(seed: int) -> tuple[str, list[int], dict[str, Any]]:
    """A random valid geometry: 1-3 spatial dims, kernel 1-7, strides, dilations, pads, modes."""
    r = np.random.default_rng(1000 + seed)
    while True:
        rank = int(r.integers(1, 4))
        sizes = [int(v) for v in r.integers(1, 13 if rank < 3 else 8, rank)]
        k = [int(v) for v in r.integers(1, 8 if rank < 3 else 4, rank)]
        attrs: dict[str, Any] = {"kernel_shape": k}
        if r.random() < 0.6:
            attrs["strides"] = [int(v) for v in r.integers(1, 4, rank)]
        if r.random() < 0.3:
            attrs["dilations"] = [int(v) for v in r.integers(1, 3, rank)]
        mode = r.choice(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])
        if mode == "NOTSET":
            attrs["pads"] = [int(r.integers(0, kk)) if kk > 1 else 0 for kk in k + k]
        else:
            attrs["auto_pad"] = str(mode)
        if mode in ("NOTSET", "VALID") and r.random() < 0.4:
            attrs["ceil_mode"] = 1
        op = str(r.choice(["MaxPool", "AveragePool"]))
        if op == "AveragePool" and r.random() < 0.5:
            attrs["count_include_pad"] = 1
        d = attrs.get("dilations", [1] * rank)
        b, e = _geometry(sizes, attrs)[1:]
        fits = all((kk - 1) * dd + 1 <= n + pb + pe for kk, dd, n, pb, pe in zip(k, d, sizes, b, e))
        if fits and min(_geometry(sizes, attrs)[0]) > 0:
            shape = [int(r.choice([1, 2]))] + sizes + [int(r.choice([1, 3, 17, 64, 70]))]
            return op, shape, attrs


@pytest.mark.parametrize("seed", range(40))
def test_random_geometries(seed: int) -> None:
    op, shape, attrs = _random_case(seed)
    x = RNG.standard_normal(shape).astype(np.float32)
    got = _run_nhwc(op, x, attrs)
    _assert_close(got, _reference(op, x, attrs))
    nchw = _session(_model(op, list(_to_nchw(x).shape), x.ndim, attrs, nhwc=False)).run({"x": _to_nchw(x)})
    _assert_close(got, _to_nhwc(nchw["y"]).astype(np.float64))


@pytest.mark.parametrize(
    "op,attrs",
    [
        ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2], "ceil_mode": 1}),
        (
            "AveragePool",
            {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
        ),
        ("AveragePool", {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [1, 0, 1, 1]}),
    ],
)
def test_pool_matches_torch(op: str, attrs: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((2, 13, 12, 24)).astype(np.float32)
    p = attrs.get("pads", [0, 0, 0, 0])
    xt = torch.from_numpy(_to_nchw(x))
    if op == "MaxPool":
        if p[:2] != p[2:]:
            pytest.skip("torch pads symmetrically")
        want = torch.nn.functional.max_pool2d(
            xt,
            attrs["kernel_shape"],
            attrs.get("strides", 1),
            p[:2],
            attrs.get("dilations", 1),
            ceil_mode=bool(attrs.get("ceil_mode", 0)),
        )
    else:
        xt = torch.nn.functional.pad(xt, (p[1], p[3], p[0], p[2]))  # explicit zero pads: counted
        include = attrs.get("count_include_pad", 0)
        if not include and any(p):
            # Uncounted pads: divide the zero-padded sum by the positions inside the input.
            ones = torch.nn.functional.pad(
                torch.ones_like(xt[:, :1, p[0] : xt.shape[2] - p[2], p[1] : xt.shape[3] - p[3]]),
                (p[1], p[3], p[0], p[2]),
            )
            k, s = attrs["kernel_shape"], attrs.get("strides", 1)
            want = torch.nn.functional.avg_pool2d(xt, k, s) / torch.nn.functional.avg_pool2d(ones, k, s)
        else:
            want = torch.nn.functional.avg_pool2d(xt, attrs["kernel_shape"], attrs.get("strides", 1))
    _assert_close(_run_nhwc(op, x, attrs), _to_nhwc(want.numpy()).astype(np.float64))


@pytest.mark.parametrize(
    "n,k,s", [(5, 1, 3), (5, 2, 2), (7, 3, 2), (9, 7, 3), (12, 2, 5)], ids=lambda v: str(v)
)
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_valid_ceil_mode_matches_onnxruntime(op: str, n: int, k: int, s: int) -> None:
    """auto_pad VALID with ceil_mode: the last window starts inside the input, as ONNX Runtime has it."""
    ort = pytest.importorskip("onnxruntime")
    attrs = {"kernel_shape": [k, 2], "strides": [s, 1], "auto_pad": "VALID", "ceil_mode": 1}
    x = RNG.standard_normal((2, n, 3, 5)).astype(np.float32)
    ref = ort.InferenceSession(
        _model(op, list(_to_nchw(x).shape), 4, attrs, nhwc=False), providers=["CPUExecutionProvider"]
    ).run(None, {"x": _to_nchw(x)})[0]
    got = _run_nhwc(op, x, attrs)
    _assert_close(got, _to_nhwc(ref).astype(np.float64))
    nchw = _session(_model(op, list(_to_nchw(x).shape), 4, attrs, nhwc=False)).run({"x": _to_nchw(x)})
    _assert_close(nchw["y"], ref.astype(np.float64))


@pytest.mark.parametrize(
    "shape",
    [
        [1, 112, 112, 32],
        [3, 7, 7, 1280],
        [2, 5, 17],
        [1, 3, 4, 5, 64],
        [2, 1, 1, 3],
        [1, 40, 40, 100],
        [4, 9, 9, 81],
    ],
)
@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(op: str, shape: list[int]) -> None:
    x = (RNG.standard_normal(shape) + 0.5).astype(np.float32)
    got = _session(_model("Nhwc" + op, list(shape), len(shape), {})).run({"x": x})["y"]
    axes = tuple(range(1, len(shape) - 1))
    x64 = x.astype(np.float64)
    want = (
        x64.mean(axis=axes, keepdims=True) if op == "GlobalAveragePool" else x64.max(axis=axes, keepdims=True)
    )
    # float32 sums over up to 12544 pixels: a tolerance scaled to the summed magnitudes.
    atol = 1e-6 * np.abs(x64).mean(axis=axes, keepdims=True).max() * 10
    _assert_close(got, want, rtol=1e-5, atol=atol)
    nchw = _session(_model(op, list(_to_nchw(x).shape), len(shape), {}, nhwc=False)).run({"x": _to_nchw(x)})[
        "y"
    ]
    _assert_close(got, _to_nhwc(nchw).astype(np.float64), rtol=1e-5, atol=atol)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_kernel_far_larger_than_the_input(op: str) -> None:
    """Windows of 10^10 taps over a padded 3x3 input: the work is bounded by the valid taps."""
    attrs = {"kernel_shape": [100000, 100000], "strides": [100000, 100000], "pads": [99999] * 4}
    x = RNG.standard_normal((2, 3, 3, 20)).astype(np.float32)
    _assert_close(_run_nhwc(op, x, attrs), _reference(op, x, attrs))


def test_global_pool_is_deterministic() -> None:
    """The spatial split depends on the shape alone: the same bits on every run."""
    x = RNG.standard_normal((1, 112, 112, 32)).astype(np.float32)
    sess = _session(_model("NhwcGlobalAveragePool", list(x.shape), 4, {}))
    first = sess.run({"x": x})["y"]
    for _ in range(5):
        np.testing.assert_array_equal(sess.run({"x": x})["y"], first)


# ------------------------------------------------------------------ NaN and infinities
def _special(shape: list[int], seed: int) -> np.ndarray:
    r = np.random.default_rng(seed)
    x = r.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    pos = r.permutation(flat.size)
    flat[pos[:7]] = np.nan
    flat[pos[7:10]] = np.inf
    flat[pos[10:13]] = -np.inf
    return x


@pytest.mark.parametrize(
    "op,attrs",
    [
        ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2]}),
        ("MaxPool", {"kernel_shape": [3, 3]}),
        ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ],
)
@pytest.mark.parametrize("channels", [5, 64, 81])
def test_pool_propagates_nan(op: str, attrs: dict[str, Any], channels: int) -> None:
    # As the NCHW MaxPool promises (test_hardening_semantics): a NaN anywhere in a window gives NaN.
    x = _special([2, 12, 12, channels], seed=channels)
    want = _reference(op, x, attrs)
    assert np.isnan(want).any()
    _assert_close(_run_nhwc(op, x, attrs), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("channels", [16, 67])
def test_maxpool_nan_in_one_image_only(channels: int) -> None:
    """Images without NaN take plain maxima (exact there); the one with NaN keeps it."""
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    x = RNG.standard_normal((3, 14, 14, channels)).astype(np.float32)
    x[1, 5, 6, 3] = np.nan  # one NaN in image 1, not at a window's first tap
    x[1, 0, 0, channels - 1] = np.nan
    x[2, 7, 7, :] = np.inf  # infinities, no NaN, in image 2
    x[2, 3, 3, :] = -np.inf
    want = _reference("MaxPool", x, attrs)
    got = _run_nhwc("MaxPool", x, attrs)
    assert np.isnan(want[1]).sum() >= 2 and not np.isnan(want[[0, 2]]).any()
    _assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("shape", [[2, 5, 5, 3], [1, 112, 112, 32], [2, 7, 7, 81]])
def test_global_max_propagates_nan(shape: list[int]) -> None:
    x = _special(shape, seed=len(shape) + shape[-1])
    got = _session(_model("NhwcGlobalMaxPool", shape, len(shape), {})).run({"x": x})["y"]
    want = x.astype(np.float64).max(axis=(1, 2), keepdims=True)
    assert np.isnan(want).any()
    _assert_close(got, want, rtol=0, atol=0)


# ------------------------------------------------------------------ shapes at run time, dispatch
def test_dynamic_shapes() -> None:
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    sess = _session(_model("NhwcMaxPool", ["N", "H", "W", 24], 4, attrs))
    for shape in ([1, 10, 10, 24], [3, 17, 9, 24]):
        x = RNG.standard_normal(shape).astype(np.float32)
        _assert_close(sess.run({"x": x})["y"], _reference("MaxPool", x, attrs))


@pytest.mark.parametrize(
    "op,attrs,key",
    [
        ("NhwcMaxPool", {"kernel_shape": [2, 2]}, "nhwcmaxpool"),
        ("NhwcAveragePool", {"kernel_shape": [2, 2]}, "nhwcaveragepool"),
        ("NhwcGlobalAveragePool", {}, "nhwcglobalaveragepool"),
        ("NhwcGlobalMaxPool", {}, "nhwcglobalmaxpool"),
    ],
)
def test_dispatcher_chooses_cpu_nhwc(op: str, attrs: dict[str, Any], key: str) -> None:
    sess = _session(_model(op, [1, 6, 6, 8], 4, attrs))
    sess.run({"x": np.zeros((1, 6, 6, 8), np.float32)})
    (d,) = [d for d in sess.explain() if d.node == "pool"]
    assert (d.op, d.chosen) == (key, "cpu_nhwc")
    (step,) = [s for s in sess.plan.steps if s["op_type"] == op]
    assert (step["op_key"], step["kernel"]) == (key, "cpu_nhwc")


def test_plan_saves_and_reloads(tmp_path: Any) -> None:
    """A saved plan with channels-last pools loads (the loader re-checks their shapes) and runs the same."""
    x = RNG.standard_normal((2, 9, 9, 40)).astype(np.float32)
    avg = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}
    mx = {"kernel_shape": [2, 2], "ceil_mode": 1}
    nodes = [
        helper.make_node("NhwcAveragePool", ["x"], ["a"], domain="xrt", **avg),
        helper.make_node("NhwcMaxPool", ["a"], ["m"], domain="xrt", **mx),
        helper.make_node("NhwcGlobalAveragePool", ["m"], ["y"], domain="xrt"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, list(x.shape))],
        [helper.make_tensor_value_info("y", F, [2, 1, 1, 40])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("xrt", 1)])
    sess = _session(model.SerializeToString())
    want = _reference("MaxPool", _reference("AveragePool", x, avg), mx)
    got = sess.run({"x": x})["y"]
    _assert_close(got, want.mean(axis=(1, 2), keepdims=True))
    path = tmp_path / "pools.xrtplan"
    sess.save_plan(path)
    again = xrt.InferenceSession(str(path), device="cpu", engine="native")
    np.testing.assert_array_equal(again.run({"x": x})["y"], got)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "op,x_shape,y_rank,attrs,outputs,match",
    [
        ("NhwcMaxPool", [4, 8], 2, {"kernel_shape": [2]}, 1, "rank 2"),
        ("NhwcAveragePool", [1, 2, 3, 4, 5, 6], 6, {"kernel_shape": [1, 1, 1, 1]}, 1, "rank 6"),
        ("NhwcGlobalAveragePool", [1, 2, 3, 4, 5, 6], 6, {}, 1, "rank 6"),
        ("NhwcGlobalMaxPool", [5], 1, {}, 1, "rank 1"),
        ("NhwcMaxPool", [1, 8, 8, 4], 4, {"kernel_shape": [2, 2]}, 2, "Indices"),
        ("NhwcGlobalMaxPool", [1, 8, 8, 4], 4, {}, 2, "one"),
        ("NhwcMaxPool", [1, 2, 2, 4], 4, {"kernel_shape": [3, 3]}, 1, "larger than the padded input"),
        (
            "NhwcAveragePool",
            [1, 4, 4, 4],
            4,
            {"kernel_shape": [3, 3], "dilations": [2, 1]},
            1,
            "larger than the padded input",
        ),
        ("NhwcAveragePool", [1, 8, 8, 4], 4, {}, 1, "kernel_shape"),
        ("NhwcMaxPool", [1, 8, 8, 4], 4, {"kernel_shape": [2, 2, 2]}, 1, "spatial dimensions"),
        ("NhwcMaxPool", [1, 8, 8, 4], 4, {"kernel_shape": [2, 2], "auto_pad": "SAME"}, 1, "auto_pad"),
        ("NhwcMaxPool", [1, 8, 8, 4], 4, {"kernel_shape": [2, 2], "strides": [0, 1]}, 1, "positive"),
    ],
)
def test_bad_nodes_are_refused_at_build(
    op: str, x_shape: list[int], y_rank: int, attrs: dict[str, Any], outputs: int, match: str
) -> None:
    with pytest.raises(xrt.InvalidModelError, match=match) as info:
        _session(_model(op, x_shape, y_rank, attrs, outputs=outputs))
    assert "pool" in str(info.value)  # names the node


def test_dynamic_shape_errors_at_run() -> None:
    sess = _session(_model("NhwcMaxPool", ["N", "H", "W", 4], 4, {"kernel_shape": [5, 5]}))
    with pytest.raises(xrt.InvalidModelError, match="larger than the padded input"):
        sess.run({"x": np.zeros((1, 3, 8, 4), np.float32)})


def test_float16_is_refused() -> None:
    with pytest.raises(xrt.UnsupportedOperationError, match="float16"):
        _session(_model("NhwcMaxPool", [1, 4, 4, 8], 4, {"kernel_shape": [2, 2]}, dtype=TensorProto.FLOAT16))
