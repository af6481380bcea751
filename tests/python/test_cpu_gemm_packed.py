"""GEMM kernel ``cpu_packed`` (ours: AVX-512F, a MatMul/Gemm's constant weights packed
once at session build) in the native CPU engine.

Every product is checked against NumPy float64 with the bound
``|y - ref| <= 1e-6 * sqrt(K) * max|ref|`` (fp32 rounding grows about as sqrt(K); a
wrong K block or column panel is off by O(max|ref|)). Covered: odd M/N/K (1, 7, 33,
129, ...: partial row tiles and column panels, K blocks), Gemm with transA/transB and a
bias, MatMul + Add with a fused Relu, batched MatMul against a shared 2-D weight, a
dynamic-M model packed once and run at several row counts, a non-constant B (another
kernel runs it, with the reason recorded), ``KernelPolicy(matmul=<each CPU kernel>)``
still pinning each, and a float64 model refused with its reason under ``require``.
Skips, saying why, on a CPU without AVX-512F (the kernel then says
``backend_unavailable``, which is checked).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper

PACKED = "cpu_packed"


def _session(model: bytes, kernel: str | None = None, mode: str = "require") -> xrt.InferenceSession:
    kp = xrt.KernelPolicy(matmul=kernel, mode=mode) if kernel else None
    return xrt.InferenceSession(
        model, device="cpu", engine="native", exec_policy=xrt.ExecutionPolicy(threads=2), kernel_policy=kp
    )


def _matmul_decisions(s: xrt.InferenceSession) -> list:  # type: ignore[type-arg]
    return list(s.explain().filter(op="matmul"))


def _model(nodes: list, inputs: list, outputs: list, inits: list, opset: int = 17) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m.SerializeToString()


def _vi(name: str, shape: list, dtype: int = TensorProto.FLOAT) -> object:
    return helper.make_tensor_value_info(name, dtype, shape)


def _matmul_add(w: np.ndarray, bias: np.ndarray, x_shape: list, relu: bool = False) -> bytes:
    """Y = [relu](X @ W + B): the compiler fuses Add (and Relu) into the MatMul."""
    nodes = [helper.make_node("MatMul", ["X", "W"], ["m"]), helper.make_node("Add", ["m", "B"], ["a"])]
    nodes.append(
        helper.make_node("Relu", ["a"], ["Y"]) if relu else helper.make_node("Identity", ["a"], ["Y"])
    )
    y_shape = list(x_shape[:-1]) + [w.shape[1]]
    return _model(
        nodes,
        [_vi("X", x_shape)],
        [_vi("Y", y_shape)],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(bias, "B")],
    )


def _check(y: np.ndarray, ref: np.ndarray, k: int) -> None:
    y64 = np.asarray(y, np.float64)
    assert y64.shape == ref.shape
    bound = 1e-6 * math.sqrt(max(k, 1)) * max(float(np.abs(ref).max()), 1e-30)
    err = float(np.abs(y64 - ref).max())
    assert err <= bound, (err, bound)


def _unavailable() -> str:
    """Empty when cpu_packed runs here; else its reason (which must be backend_unavailable)."""
    rng = np.random.default_rng(0)
    s = _session(
        _matmul_add(rng.standard_normal((8, 8)).astype(np.float32), np.zeros(8, np.float32), [4, 8]),
        PACKED,
        "prefer",
    )
    d = _matmul_decisions(s)[0]
    if d.chosen == PACKED:
        return ""
    c = d.candidate(PACKED)
    assert c.reason_code == "backend_unavailable", (c.reason_code, c.detail)
    return c.detail


MISSING = _unavailable()
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"cpu_packed unavailable: {MISSING}")


def _rand(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    "m,k,n",
    [(3, 1, 1), (7, 33, 65), (33, 129, 7), (129, 7, 200), (13, 1030, 64), (64, 2049, 130), (197, 384, 1536)],
)
@pytest.mark.parametrize("relu", [False, True])
def test_matmul_add_odd_shapes_is_the_default_and_matches_float64(m: int, k: int, n: int, relu: bool) -> None:
    rng = np.random.default_rng([m, k, n, int(relu)])
    w, bias, x = _rand(rng, (k, n)), _rand(rng, (n,)), _rand(rng, (m, k))
    s = _session(_matmul_add(w, bias, [m, k], relu))
    ds = _matmul_decisions(s)
    assert ds and all(d.chosen == PACKED for d in ds), [d.summary() for d in ds]
    ref = x.astype(np.float64) @ w.astype(np.float64) + bias
    if relu:
        ref = np.maximum(ref, 0)
    _check(s.run({"X": x})["Y"], ref, k)


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("m,k,n", [(33, 70, 129), (128, 768, 100)])
def test_gemm_transposes_and_bias(ta: bool, tb: bool, m: int, k: int, n: int) -> None:
    rng = np.random.default_rng([int(ta), int(tb), m])
    a, b, c = _rand(rng, (m, k)), _rand(rng, (k, n)), _rand(rng, (n,))
    a_in = np.ascontiguousarray(a.T) if ta else a
    b_in = np.ascontiguousarray(b.T) if tb else b
    model = _model(
        [helper.make_node("Gemm", ["A", "B", "C"], ["Y"], transA=int(ta), transB=int(tb))],
        [_vi("A", list(a_in.shape))],
        [_vi("Y", [m, n])],
        [numpy_helper.from_array(b_in, "B"), numpy_helper.from_array(c, "C")],
    )
    s = _session(model, PACKED)
    _check(s.run({"A": a_in})["Y"], a.astype(np.float64) @ b.astype(np.float64) + c, k)


def test_batched_matmul_with_a_shared_weight() -> None:
    rng = np.random.default_rng(3)
    w, bias, x = _rand(rng, (96, 200)), _rand(rng, (200,)), _rand(rng, (3, 17, 96))
    s = _session(_matmul_add(w, bias, [3, 17, 96]))
    assert all(d.chosen == PACKED for d in _matmul_decisions(s))
    _check(s.run({"X": x})["Y"], x.astype(np.float64) @ w.astype(np.float64) + bias, 96)


def test_layers_sharing_one_weight() -> None:
    """ALBERT's layers reuse each weight: the steps share one packed copy."""
    rng = np.random.default_rng(9)
    w, x = _rand(rng, (48, 48)) / 7, _rand(rng, (10, 48))
    model = _model(
        [helper.make_node("MatMul", ["X", "W"], ["h"]), helper.make_node("MatMul", ["h", "W"], ["Y"])],
        [_vi("X", [10, 48])],
        [_vi("Y", [10, 48])],
        [numpy_helper.from_array(w, "W")],
    )
    s = _session(model)
    ds = _matmul_decisions(s)
    assert len(ds) == 2 and all(d.chosen == PACKED for d in ds), [d.summary() for d in ds]
    w64 = w.astype(np.float64)
    _check(s.run({"X": x})["Y"], x.astype(np.float64) @ w64 @ w64, 48 * 48)


def test_dynamic_rows_packed_once_run_at_several_shapes() -> None:
    rng = np.random.default_rng(4)
    w, bias = _rand(rng, (160, 72)), _rand(rng, (72,))
    s = _session(_matmul_add(w, bias, ["batch", "seq", 160]))
    for shape in [(1, 1, 160), (1, 5, 160), (3, 43, 160), (2, 300, 160), (1, 5, 160)]:
        x = _rand(rng, shape)
        _check(s.run({"X": x})["Y"], x.astype(np.float64) @ w.astype(np.float64) + bias, 160)
    assert all(d.chosen == PACKED for d in _matmul_decisions(s))


def test_non_constant_b_runs_on_another_kernel_with_the_reason() -> None:
    rng = np.random.default_rng(5)
    a, b = _rand(rng, (40, 64)), _rand(rng, (64, 48))
    model = _model(
        [helper.make_node("MatMul", ["A", "B"], ["Y"])],
        [_vi("A", [40, 64]), _vi("B", [64, 48])],
        [_vi("Y", [40, 48])],
        [],
    )
    s = _session(model, PACKED, "prefer")
    d = _matmul_decisions(s)[0]
    assert d.chosen != PACKED, d.summary()
    c = d.candidate(PACKED)
    assert c.reason_code == "shape_unsupported" and "constant" in c.detail, (c.reason_code, c.detail)
    _check(s.run({"A": a, "B": b})["Y"], a.astype(np.float64) @ b.astype(np.float64), 64)
    # Under require the typed error names the kernel and why.
    with pytest.raises(xrt.UnsupportedOperationError, match="cpu_packed"):
        _session(model, PACKED, "require")


def test_matrix_vector_rows_go_to_cpu_blas_path_with_the_reason() -> None:
    rng = np.random.default_rng(6)
    w, bias = _rand(rng, (64, 40)), _rand(rng, (40,))
    s = _session(_matmul_add(w, bias, [1, 64]), PACKED, "prefer")
    d = _matmul_decisions(s)[0]
    assert d.chosen != PACKED and "matrix-vector" in d.candidate(PACKED).detail, d.summary()
    x = _rand(rng, (1, 64))
    _check(s.run({"X": x})["Y"], x.astype(np.float64) @ w.astype(np.float64) + bias, 64)


@pytest.mark.parametrize("kernel", ["cpu_packed", "onednn", "cpu_blas", "cpu_blocked"])
def test_each_kernel_can_still_be_pinned(kernel: str) -> None:
    available = {k.name for k in xrt.kernels.list_kernels("matmul", "cpu")}
    if kernel not in available:
        pytest.skip(f"{kernel} not registered in this build")
    rng = np.random.default_rng(7)
    w, bias, x = _rand(rng, (130, 70)), _rand(rng, (70,)), _rand(rng, (33, 130))
    s = _session(_matmul_add(w, bias, [33, 130]), kernel, "prefer")
    d = _matmul_decisions(s)[0]
    if d.chosen != kernel:  # only an unavailable backend may refuse
        assert d.candidate(kernel).reason_code == "backend_unavailable", d.summary()
    _check(s.run({"X": x})["Y"], x.astype(np.float64) @ w.astype(np.float64) + bias, 130)


def test_float64_is_refused_with_the_reason() -> None:
    rng = np.random.default_rng(8)
    w = rng.standard_normal((16, 8))
    model = _model(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        [_vi("X", [4, 16], TensorProto.DOUBLE)],
        [_vi("Y", [4, 8], TensorProto.DOUBLE)],
        [numpy_helper.from_array(w, "W")],
    )
    s = _session(model, PACKED, "prefer")
    d = _matmul_decisions(s)[0]
    assert d.chosen != PACKED and d.candidate(PACKED).reason_code == "dtype_unsupported", d.summary()
    x = rng.standard_normal((4, 16))
    np.testing.assert_allclose(s.run({"X": x})["Y"], x @ w, rtol=1e-12)
    with pytest.raises(xrt.UnsupportedOperationError, match="float64"):
        _session(model, PACKED, "require")
