"""GEMM kernel ``onednn`` (oneDNN's matmul primitive) for the native CPU engine.

Random float32 products pinned to ``onednn`` against NumPy float64 (tolerance 1e-5
relative to Σ|a||b|): transposed operands, batches with a broadcast operand, a
strided output, bias with each activation, empty dims, K up to 3072; ONNX MatMul
(+ Add, fused as the bias) and Gemm models through ``InferenceSession(engine="native")``
against ONNX Runtime, with the choice recorded in ``explain()``; a dynamic-shape
model at three shapes; ``KernelPolicy(matmul="cpu_blas")`` still pins cpu_blas; cases
oneDNN cannot express are rejected with their reason and run on cpu_blas. Skips,
saying why, when the build has no oneDNN (the kernel then reports
``backend_unavailable``, which is checked).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper
from xpuruntime import ops

RTOL = 1e-5


def _missing() -> str:
    """Empty when the build has oneDNN; else why not (and the kernel says so)."""
    a = np.ones((4, 3), np.float32)  # 4 rows: oneDNN leaves 1-2 row products to cpu_blas
    ops.matmul(a, a.T, policy=xrt.KernelPolicy(matmul="onednn", mode="prefer"))
    d = ops.last_decision()
    if d.chosen == "onednn":
        return ""
    c = d.candidate("onednn")
    assert c.reason_code == "backend_unavailable", (c.reason_code, c.detail)
    return c.detail


MISSING = _missing()
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"onednn kernel unavailable: {MISSING}")
ONEDNN = xrt.KernelPolicy(matmul="onednn", mode="require")


def _rand(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _act(y: np.ndarray, act: str | None) -> np.ndarray:
    if act == "relu":
        return np.maximum(y, 0)
    if act == "gelu":  # the tanh form (ops.ACTIVATIONS)
        return 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y**3)))
    return y


def _check(
    got: np.ndarray, a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None, act: str | None = None
) -> None:
    """got == act(a @ b + bias) within RTOL of Σ|a||b| per element (float64 reference)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64 @ b64 + (0 if bias is None else bias.astype(np.float64))
    mag = np.abs(a64) @ np.abs(b64) + (0 if bias is None else np.abs(bias.astype(np.float64)))
    ref = _act(ref, act)
    assert got.shape == ref.shape
    err = np.abs(got.astype(np.float64) - ref)
    assert np.all(err <= RTOL * (1 + mag)), float((err / (1 + mag)).max())


def _mm(a: np.ndarray, b: np.ndarray, **kw: object) -> np.ndarray:
    """ops.matmul pinned to onednn; checks the decision says so."""
    y = np.asarray(ops.matmul(a, b, policy=ONEDNN, **kw))
    d = ops.last_decision()
    assert d.chosen == "onednn", d.summary()
    return y


@pytest.mark.parametrize("act", [None, "relu", "gelu"])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_transposed_operands_bias_and_activation(ta: bool, tb: bool, act: str | None) -> None:
    rng = np.random.default_rng([int(ta), int(tb), [None, "relu", "gelu"].index(act)])
    m, k, n = 37, 53, 29
    a = _rand(rng, (k, m)).T if ta else _rand(rng, (m, k))  # a transposed view, not a copy
    b = _rand(rng, (n, k)).T if tb else _rand(rng, (k, n))
    bias = _rand(rng, (n,))
    _check(_mm(a, b, bias=bias, activation=act), a, b, bias, act)


@pytest.mark.parametrize(
    "a_shape,b_shape",
    [((4, 17, 31), (4, 31, 23)), ((4, 17, 31), (31, 23)), ((17, 31), (4, 31, 23)), ((2, 3, 5, 8), (8, 6))],
)
def test_batches_with_a_broadcast_operand(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(7)
    a, b = _rand(rng, a_shape), _rand(rng, b_shape)
    bias = _rand(rng, (b_shape[-1],))
    _check(_mm(a, b, bias=bias, activation="relu"), a, b, bias, "relu")


def test_strided_output_leaves_the_gaps() -> None:
    rng = np.random.default_rng(8)
    a, b = _rand(rng, (3, 9, 12)), _rand(rng, (3, 12, 10))
    big = np.full((3, 9, 16), -7.0, np.float32)
    out = big[:, :, 2:12]  # row stride 16, not 10
    ops.matmul(a, b, out=out, policy=ONEDNN)
    assert ops.last_decision().chosen == "onednn"
    _check(out, a, b)
    assert np.all(big[:, :, :2] == -7) and np.all(big[:, :, 12:] == -7)


def test_long_reduction_of_a_transformer_layer() -> None:
    rng = np.random.default_rng(9)
    a, w, bias = _rand(rng, (128, 3072)), _rand(rng, (3072, 768)), _rand(rng, (768,))
    _check(_mm(a, w, bias=bias, activation="gelu"), a, w, bias, "gelu")


@pytest.mark.parametrize("m,k,n", [(0, 4, 5), (4, 0, 5), (4, 5, 0)])
def test_empty_dims(m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(10)
    a, b, bias = _rand(rng, (m, k)), _rand(rng, (k, n)), _rand(rng, (n,))
    y = np.asarray(ops.matmul(a, b, bias=bias, activation="relu", policy=ONEDNN))
    assert y.shape == (m, n)
    _check(y, a, b, bias, "relu")  # K = 0: relu(bias) on every row


def test_rejected_cases_say_why_and_run_on_cpu_blas() -> None:
    rng = np.random.default_rng(11)
    prefer = xrt.KernelPolicy(matmul="onednn", mode="prefer")
    # float64: not a oneDNN dtype here.
    a, b = rng.standard_normal((6, 7)), rng.standard_normal((7, 5))
    y = np.asarray(ops.matmul(a, b, policy=prefer))
    d = ops.last_decision()
    assert d.chosen == "cpu_blas", d.summary()
    assert d.candidate("onednn").reason_code == "dtype_unsupported"
    assert "float64" in d.candidate("onednn").detail
    np.testing.assert_allclose(y, a @ b, rtol=1e-12)
    # An operand with neither contiguous rows nor contiguous columns.
    big = _rand(rng, (12, 14))
    a32 = big[::2, ::2]  # strides (28, 2) elements
    b32 = _rand(rng, (7, 5))
    y = np.asarray(ops.matmul(a32, b32, policy=prefer))
    d = ops.last_decision()
    assert d.chosen == "cpu_blas", d.summary()
    c = d.candidate("onednn")
    assert c.reason_code == "layout_unsupported" and "contiguous" in c.detail, (c.reason_code, c.detail)
    _check(y, a32, b32)
    # Pinned with require, the typed error names the reason.
    with pytest.raises(xrt.UnsupportedOperationError, match="onednn"):
        ops.matmul(a32, b32, policy=ONEDNN)
    # The row sums of A (a bias-gradient epilogue only cublasLt has).
    with pytest.raises(xrt.UnsupportedOperationError, match="row-sums"):
        ops.matmul_with_kernel("onednn", a32.copy(), b32, a_row_sums=np.zeros(6, np.float32))


# ---- ONNX models through the native engine ---------------------------------------


def _matmul_add_model(k: int, n: int, dyn: bool, w: np.ndarray, bias: np.ndarray) -> bytes:
    """Y = X @ W + B (the compiler fuses the Add into the MatMul as its bias)."""
    x_shape = ["batch", "seq", k] if dyn else [2, 16, k]
    y_shape = ["batch", "seq", n] if dyn else [2, 16, n]
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "W"], ["m"], name="mm"),
            helper.make_node("Add", ["m", "B"], ["Y"], name="add"),
        ],
        "mm",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(bias, "B")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _session(model: bytes, matmul: str, mode: str = "require") -> xrt.InferenceSession:
    return xrt.InferenceSession(
        model, device="cpu", engine="native", kernel_policy=xrt.KernelPolicy(matmul=matmul, mode=mode)
    )


def _matmul_decisions(s: xrt.InferenceSession) -> list:  # type: ignore[type-arg]
    """The session's decisions for op key matmul (MatMul/Gemm nodes and sub-GEMMs)."""
    return list(s.explain().filter(op="matmul"))


def test_matmul_add_model_matches_onnxruntime_and_is_recorded() -> None:
    rng = np.random.default_rng(12)
    w, bias = _rand(rng, (96, 80)), _rand(rng, (80,))
    model = _matmul_add_model(96, 80, False, w, bias)
    x = _rand(rng, (2, 16, 96))
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    for kernel in ("onednn", "cpu_blas"):
        s = _session(model, kernel)
        y = np.asarray(s.run({"X": x})["Y"])
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-4)
        _check(y, x, w, bias)
        ds = _matmul_decisions(s)
        assert ds and all(d.chosen == kernel for d in ds), [d.summary() for d in ds]
        assert kernel in s.explain().to_table(style="plain")


def test_default_choice_is_onednn_where_cpu_packed_cannot_run() -> None:
    """cpu_packed (test_cpu_gemm_packed.py: AVX-512F, above onednn) takes a MatMul whose
    weights are plan constants; where it cannot run, the default is onednn."""
    rng = np.random.default_rng(13)
    model = _matmul_add_model(32, 24, False, _rand(rng, (32, 24)), _rand(rng, (24,)))
    s = xrt.InferenceSession(model, device="cpu", engine="native")
    ds = _matmul_decisions(s)
    for d in ds:
        packed = d.candidate("cpu_packed")
        want = "cpu_packed" if packed is not None and packed.verdict == "supported" else "onednn"
        assert d.chosen == want, d.summary()
    assert ds


def test_dynamic_shape_model_at_three_shapes() -> None:
    rng = np.random.default_rng(14)
    w, bias = _rand(rng, (64, 48)), _rand(rng, (48,))
    s = _session(_matmul_add_model(64, 48, True, w, bias), "onednn")
    for shape in [(1, 5, 64), (3, 17, 64), (1, 5, 64), (2, 130, 64)]:
        x = _rand(rng, shape)
        y = np.asarray(s.run({"X": x})["Y"])
        _check(y, x, w, bias)
    assert all(d.chosen == "onednn" for d in _matmul_decisions(s))


def test_gemm_node_with_transposed_weights() -> None:
    rng = np.random.default_rng(15)
    w, c = _rand(rng, (40, 72)), _rand(rng, (40,))
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["X", "W", "C"], ["Y"], name="fc", transB=1)],
        "fc",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [6, 72])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [6, 40])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(c, "C")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    x = _rand(rng, (6, 72))
    s = _session(model, "onednn")
    y = np.asarray(s.run({"X": x})["Y"])
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-4)
    _check(y, x, w.T, c)
    assert all(d.chosen == "onednn" for d in _matmul_decisions(s))


def test_float64_model_falls_back_to_cpu_blas_with_the_reason() -> None:
    rng = np.random.default_rng(16)
    w = rng.standard_normal((8, 5))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"], name="mm")],
        "mm64",
        [helper.make_tensor_value_info("X", TensorProto.DOUBLE, [3, 8])],
        [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, [3, 5])],
        [numpy_helper.from_array(w, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    s = _session(model, "onednn", mode="prefer")
    (d,) = _matmul_decisions(s)
    assert d.chosen == "cpu_blas", d.summary()
    assert d.candidate("onednn").reason_code == "dtype_unsupported", d.candidate("onednn").detail
    x = rng.standard_normal((3, 8))
    y = np.asarray(s.run({"X": x})["Y"])
    np.testing.assert_allclose(y, x @ w, rtol=1e-12)


def _conv_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """2-D convolution, stride 1, pads 1, in float64."""
    n, _, h, wd = x.shape
    m, kh, kw = w.shape[0], w.shape[2], w.shape[3]
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (1, 1), (1, 1)])
    y = np.zeros((n, m, h, wd)) + b.astype(np.float64).reshape(1, m, 1, 1)
    for i in range(kh):
        for j in range(kw):
            y += np.einsum("nchw,mc->nmhw", xp[:, :, i : i + h, j : j + wd], w[:, :, i, j].astype(np.float64))
    return y


def test_conv_im2col_tiles_share_one_primitive() -> None:
    """Conv's im2col GEMM dispatched to onednn: the tiles run one primitive from several
    threads at once (each with its own scratchpad); results match float64 and repeat
    bit for bit. (The race a shared scratchpad causes shows only in some processes
    here; tests/cpp/test_onednn_gemm.cpp InsideOurPoolsParallelJobs catches it.)"""
    rng = np.random.default_rng(17)
    x, w, b = _rand(rng, (8, 8, 16, 16)), _rand(rng, (8, 8, 3, 3)) * 0.1, _rand(rng, (8,))
    graph = helper.make_graph(
        [
            helper.make_node(
                "Conv", ["X", "W", "B"], ["Y"], name="conv", pads=[1, 1, 1, 1], kernel_shape=[3, 3]
            )
        ],
        "conv",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [8, 8, 16, 16])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    s = xrt.InferenceSession(
        model,
        device="cpu",
        engine="native",
        kernel_policy=xrt.KernelPolicy(conv="cpu_im2col", matmul="onednn", mode="require"),
        exec_policy=xrt.ExecutionPolicy(threads=2),
    )
    assert [d.chosen for d in _matmul_decisions(s)] == ["onednn"]
    ref = _conv_ref(x, w, b)
    mag = _conv_ref(np.abs(x), np.abs(w), np.abs(b))
    first = np.asarray(s.run({"X": x})["Y"]).copy()
    assert np.all(np.abs(first - ref) <= RTOL * (1 + mag))
    for _ in range(7):
        np.testing.assert_array_equal(np.asarray(s.run({"X": x})["Y"]), first)


@pytest.mark.parametrize("rows", [1, 2, 16])
def test_matrix_vector_products_go_to_cpu_blas(rows: int) -> None:
    # One or two rows (classifier heads, one-token decoding) are left to cpu_blas's
    # split, measured 2.4-4.4x faster there; from 16 rows oneDNN runs them.
    rng = np.random.default_rng(rows)
    a, b = _rand(rng, (rows, 96)), _rand(rng, (96, 40))
    y = ops.matmul(a, b, policy=xrt.KernelPolicy(matmul=["onednn", "cpu_blas", "cpu_blocked"]))
    np.testing.assert_allclose(np.asarray(y), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    d = ops.last_decision()
    if rows <= 2:
        assert d.chosen != "onednn"
        c = d.candidate("onednn")
        assert c.reason_code == "shape_unsupported" and "matrix-vector" in c.detail, c.detail
    else:
        assert d.chosen == "onednn"


@pytest.mark.parametrize(
    "kind,k,n,act",
    [("MatMul", 96, 1024, None), ("MatMul", 64, 1536, "Relu"), ("Gemm", 512, 80, None), ("MatMul", 96, 1000, None)],
)
@pytest.mark.parametrize("rows", [37, 5])
def test_constant_weights_2k_apart_run_packed_and_match(kind: str, k: int, n: int, act: str | None, rows: int) -> None:
    # Static shapes: B's rows (Gemm transB: its columns) a multiple of 2 KiB apart are
    # packed once into oneDNN's layout when the session is built; the result must
    # match float64. N=1000 is not packed (control); the dynamic-shape model runs the
    # plain path.
    rng = np.random.default_rng(k + n + rows)
    w = (_rand(rng, (n, k) if kind == "Gemm" else (k, n)) / np.sqrt(k)).astype(np.float32)
    bias = _rand(rng, (n,))
    for dynamic in (False, True):
        if kind == "Gemm":
            nodes = [helper.make_node("Gemm", ["X", "W", "B"], ["Y"], transB=1)]
            x_shape, w_ref, shape = ["r" if dynamic else rows, k], w.T.astype(np.float64), (rows, k)
        else:
            nodes = [helper.make_node("MatMul", ["X", "W"], ["m"]), helper.make_node("Add", ["m", "B"], ["Y"])]
            x_shape = ["b" if dynamic else 2, "r" if dynamic else rows, k]
            w_ref, shape = w.astype(np.float64), (2, rows, k)
        if act:
            nodes[-1].output[0] = "pre"
            nodes.append(helper.make_node(act, ["pre"], ["Y"]))
        g = helper.make_graph(
            nodes,
            "packed",
            [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [f"y{i}" for i in range(len(x_shape))])],
            [numpy_helper.from_array(w, "W"), numpy_helper.from_array(bias, "B")],
        )
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
        sess = xrt.InferenceSession(model, device="cpu", engine="native")
        x = _rand(rng, shape)
        want = x.astype(np.float64) @ w_ref + bias
        if act == "Relu":
            want = np.maximum(want, 0)
        got = np.asarray(sess.run({"X": x})["Y"])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
