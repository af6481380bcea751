"""xpuruntime.ops.matmul on the CPU against NumPy float64 on fresh random inputs.

Every CPU kernel (cpu_blas, cpu_blocked) is forced through a ``require`` policy and
the automatic choice is checked too. Shapes include odd sizes, vectors, broadcast
and strided batches, transposed and sliced views; epilogues bias/relu/gelu; the
bad-input paths raise typed errors that name the problem.

Tolerance: |got - ref| <= c * (K * u_acc * sum|a||b| + u_out * |ref|), the classic
bound for a K-term dot product (u_acc: fp32 accumulation for fp32/fp16/bf16, fp64
for float64; u_out: rounding to the output dtype). A wrong element breaks it by
orders of magnitude.
"""

from __future__ import annotations

import numpy as np
import pytest
import xpuruntime as xrt
from xpuruntime import ops

ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes (pip install ml-dtypes)")

# cpu_blas exists where the build found a CBLAS (OpenBLAS in CI); elsewhere it is
# registered but refuses with backend_unavailable (tested below).
BLAS = ops.cpu_gemm_info()["blas_available"]
CPU_KERNELS = ["cpu_blas", "cpu_blocked"] if BLAS else ["cpu_blocked"]
# Also registered (float32 only, tested in test_onednn_gemm.py): oneDNN's matmul,
# the automatic float32 choice where the build has oneDNN.
AUTO_KERNELS = ["onednn", *CPU_KERNELS]
RNG = np.random.default_rng()  # fresh inputs every run; the seed is printed on failure
SEED = int(RNG.integers(0, 2**31))
RNG = np.random.default_rng(SEED)

DTYPES = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
}
U_OUT = {"float32": 2.0**-24, "float64": 2.0**-53, "float16": 2.0**-11, "bfloat16": 2.0**-8}


def _policy(kernel: str | None, validate: bool = True) -> xrt.KernelPolicy | None:
    if kernel is None:
        return None
    return xrt.KernelPolicy(matmul=kernel, mode="require", validate=validate)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def _reference(a, b, bias=None, activation=None):
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    ref = np.matmul(a64, b64)
    mag = np.matmul(np.abs(a64), np.abs(b64))
    if bias is not None:
        ref = ref + np.asarray(bias, np.float64)
        mag = mag + np.abs(np.asarray(bias, np.float64))
    if activation == "relu":
        ref = np.maximum(ref, 0.0)
    elif activation == "gelu":
        ref = _gelu(ref)
    return ref, mag


def _check(got, a, b, dtype_name, bias=None, activation=None):
    got = np.asarray(np.asarray(got), np.float64)
    ref, mag = _reference(a, b, bias, activation)
    assert got.shape == ref.shape
    k = np.shape(a)[-1]
    u_acc = 2.0**-53 if dtype_name == "float64" else 2.0**-24
    # float16 outputs below 2^-14 are subnormal: their rounding error is absolute
    # (half the subnormal spacing 2^-24), not relative to the value.
    subnormal = 2.0**-24 if dtype_name == "float16" else 0.0
    tol = 1.2 * ((k + 4) * u_acc * mag + 2 * U_OUT[dtype_name] * np.abs(ref)) + subnormal + 1e-300
    bad = np.abs(got - ref) > tol
    assert not bad.any(), (
        f"seed {SEED}: {bad.sum()} of {bad.size} elements off; worst |err|="
        f"{np.abs(got - ref).max():.3e}, tol there {tol.flat[np.argmax(np.abs(got - ref))]:.3e}"
    )


def _rand(shape, dtype):
    return RNG.uniform(-1.0, 1.0, size=shape).astype(DTYPES[dtype])


@pytest.mark.parametrize("kernel", CPU_KERNELS + [None])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_random_shapes_against_numpy_float64(kernel, dtype):
    policy = _policy(kernel)
    for _ in range(12):
        batch = tuple(int(x) for x in RNG.integers(1, 4, size=int(RNG.integers(0, 3))))
        m, n, k = (int(x) for x in RNG.integers(1, 140, size=3))
        a, b = _rand(batch + (m, k), dtype), _rand(batch + (k, n), dtype)
        got = ops.matmul(a, b, policy=policy)
        assert isinstance(got, xrt.Tensor)
        assert got.dtype == dtype
        _check(got, a, b, dtype)
        if kernel is not None:
            d = ops.last_decision()
            assert d is not None and d.chosen == kernel and d.rule == "policy.require"


@pytest.mark.parametrize("kernel", CPU_KERNELS)
@pytest.mark.parametrize(
    "m,n,k", [(1, 1, 1), (1, 257, 31), (257, 1, 33), (7, 13, 1), (97, 65, 513), (6, 16, 256), (300, 129, 200)]
)
def test_odd_and_block_edge_sizes(kernel, m, n, k):
    a, b = _rand((m, k), "float32"), _rand((k, n), "float32")
    _check(ops.matmul(a, b, policy=_policy(kernel)), a, b, "float32")


@pytest.mark.parametrize("kernel", CPU_KERNELS)
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_bias_and_activation_epilogues(kernel, activation, dtype):
    a, b = _rand((3, 37, 61), dtype), _rand((61, 45), dtype)
    bias = _rand((45,), dtype)
    got = ops.matmul(a, b, bias=bias, activation=activation, policy=_policy(kernel))
    _check(got, a, b, dtype, bias=bias, activation=activation)


@pytest.mark.parametrize("kernel", CPU_KERNELS)
def test_views_transposes_and_broadcasts(kernel):
    policy = _policy(kernel)
    base = _rand((2, 3, 50, 40), "float64")
    cases = [
        (base[0, 0].T, _rand((50, 17), "float64")),  # transposed a
        (_rand((9, 50), "float64"), base[1, 2]),  # b is a plain view
        (_rand((9, 50), "float64"), base[1, 2, :, ::2]),  # b with a column stride of 2
        (base[:, :, ::3, :], _rand((40, 11), "float64")),  # strided rows, 2-D b broadcast
        (_rand((4, 1, 5, 6), "float64"), _rand((3, 6, 7), "float64")),  # batch broadcast both ways
        (base.transpose(1, 0, 3, 2), _rand((3, 1, 50, 8), "float64")),  # permuted batch dims
        (_rand((6,), "float64"), _rand((2, 6, 5), "float64")),  # 1-D a
        (_rand((3, 4, 6), "float64"), _rand((6,), "float64")),  # 1-D b
        (_rand((6,), "float64"), _rand((6,), "float64")),  # dot product
    ]
    for a, b in cases:
        got = ops.matmul(a, b, policy=policy)
        assert tuple(got.shape) == np.matmul(a, b).shape
        _check(got, a, b, "float64")


def test_inputs_from_tensors_and_dlpack_producers():
    class Producer:  # anything with __dlpack__ (not a numpy array)
        def __init__(self, arr):
            self._arr = arr

        def __dlpack__(self, **kwargs):
            return self._arr.__dlpack__()

        def __dlpack_device__(self):
            return self._arr.__dlpack_device__()

    a, b = _rand((5, 7), "float32"), _rand((7, 3), "float32")
    _check(ops.matmul(xrt.from_dlpack(a), Producer(b)), a, b, "float32")


@pytest.mark.parametrize("kernel", CPU_KERNELS)
def test_out_is_written_in_place_including_strided(kernel):
    a, b = _rand((2, 8, 5), "float32"), _rand((2, 5, 6), "float32")
    out = np.full((2, 8, 6), np.nan, np.float32)
    got = ops.matmul(a, b, out=out, policy=_policy(kernel))
    _check(out, a, b, "float32")
    assert np.shares_memory(np.asarray(got), out)
    buf = np.full((2, 6, 8), np.nan, np.float32)
    col_major = buf.transpose(0, 2, 1)  # (2, 8, 6) with unit row stride
    ops.matmul(a, b, out=col_major, policy=_policy(kernel))
    _check(col_major, a, b, "float32")


def test_empty_reduction_and_empty_output():
    a, b = np.zeros((4, 0), np.float32), np.zeros((0, 3), np.float32)
    bias = _rand((3,), "float32")
    got = np.asarray(ops.matmul(a, b, bias=bias, activation="relu"))
    np.testing.assert_array_equal(got, np.broadcast_to(np.maximum(bias, 0), (4, 3)))
    assert np.asarray(ops.matmul(np.zeros((0, 5), np.float32), _rand((5, 2), "float32"))).shape == (0, 2)


def test_bmm_requires_equal_batches():
    a, b = _rand((3, 4, 5), "float32"), _rand((3, 5, 2), "float32")
    _check(ops.bmm(a, b), a, b, "float32")
    with pytest.raises(xrt.InvalidArgumentError, match="bmm"):
        ops.bmm(a, _rand((1, 5, 2), "float32"))


def test_every_call_records_a_decision():
    disp = xrt._core.Dispatcher.instance()
    a, b = _rand((3, 4), "float32"), _rand((4, 5), "float32")
    before = disp.total_recorded
    for _ in range(3):
        ops.matmul(a, b)
    assert disp.total_recorded == before + 3
    d = ops.last_decision()
    assert d.op == "matmul" and d.device == "cpu" and d.chosen in AUTO_KERNELS
    assert d.rule == "auto.first_supported"
    assert {c.kernel for c in d.candidates} >= set(CPU_KERNELS)
    last = disp.explain(1)[0]
    assert last.seq == d.seq and last.chosen == d.chosen


def test_require_a_gpu_kernel_on_cpu_tensors_raises_with_reason():
    a, b = _rand((3, 4), "float32"), _rand((4, 5), "float32")
    with pytest.raises(xrt.UnsupportedOperationError, match="cublasLt"):
        ops.matmul(a, b, policy=_policy("cublasLt"))


def test_prefer_policy_falls_back_and_says_why():
    a, b = _rand((3, 4), "float32"), _rand((4, 5), "float32")
    policy = xrt.KernelPolicy(matmul="cublas", mode="prefer")
    _check(ops.matmul(a, b, policy=policy), a, b, "float32")
    d = ops.last_decision()
    assert d.rule == "fallback" and d.chosen in AUTO_KERNELS
    assert d.candidate("cublas").verdict == "rejected"


def test_best_performance_times_the_cpu_kernels_and_pins_the_winner():
    a, b = _rand((64, 48), "float32"), _rand((48, 80), "float32")
    policy = xrt.KernelPolicy(auto_strategy="best_performance")
    _check(ops.matmul(a, b, policy=policy), a, b, "float32")
    d = ops.last_decision()
    assert d.rule == "auto.best_performance" and d.pin is not None
    assert set(d.timings) >= set(CPU_KERNELS)
    pinned = xrt.dispatch.export_pins(policy)
    _check(ops.matmul(a, b, policy=pinned), a, b, "float32")
    d2 = ops.last_decision()
    assert d2.rule == "pinned" and d2.chosen == d.chosen


def test_bad_inputs_raise_typed_errors_naming_the_problem():
    f32 = _rand((3, 4), "float32")
    with pytest.raises(xrt.InvalidArgumentError, match=r"\[3, 4\].*\[5, 2\]"):
        ops.matmul(f32, _rand((5, 2), "float32"))
    with pytest.raises(xrt.InvalidArgumentError, match="does not promote"):
        ops.matmul(f32, _rand((4, 2), "float64"))
    with pytest.raises(xrt.InvalidArgumentError, match="bias must have shape"):
        ops.matmul(f32, _rand((4, 2), "float32"), bias=_rand((3,), "float32"))
    with pytest.raises(xrt.InvalidArgumentError, match="unknown activation 'tanh'"):
        ops.matmul(f32, _rand((4, 2), "float32"), activation="tanh")
    with pytest.raises(xrt.InvalidArgumentError, match="out has shape"):
        ops.matmul(f32, _rand((4, 2), "float32"), out=np.zeros((3, 3), np.float32))
    with pytest.raises(xrt.InvalidArgumentError, match="overlaps"):
        ops.matmul(f32, f32.T.copy(), out=f32[:, :3])
    with pytest.raises(xrt.InvalidArgumentError, match="do not broadcast"):
        ops.matmul(_rand((2, 3, 4), "float32"), _rand((3, 4, 2), "float32"))
    with pytest.raises(xrt.UnsupportedOperationError, match="dtype_unsupported"):
        ops.matmul(np.ones((2, 2), np.int32), np.ones((2, 2), np.int32))
    with pytest.raises(xrt.PolicyError, match="did you mean"):  # an unvalidated policy is checked here
        ops.matmul(f32, _rand((4, 2), "float32"), policy=_policy("cpu_blokced", validate=False))
    with pytest.raises(TypeError, match="KernelPolicy"):
        ops.matmul(f32, _rand((4, 2), "float32"), policy="cpu_blas")


def test_direct_kernel_call_matches_and_reports_unknown_kernels():
    a, b = _rand((9, 10), "float32"), _rand((10, 4), "float32")
    for kernel in CPU_KERNELS:
        _check(ops.matmul_with_kernel(kernel, a, b), a, b, "float32")
    with pytest.raises(xrt.UnsupportedOperationError, match="registered"):
        ops.matmul_with_kernel("nope", a, b)


def test_fused_row_sums_are_validated_and_refused_by_the_cpu_kernels():
    """a_row_sums (the fused bias gradient) is a cuBLASLt epilogue: the CPU kernels
    refuse it with their reason, malformed outputs raise InvalidArgumentError, and
    nothing is written before a refusal."""
    a, b = _rand((6, 10), "float16"), _rand((10, 5), "float16")
    sums = np.full(6, 7.0, np.float16)
    for kernel in CPU_KERNELS:
        with pytest.raises(xrt.UnsupportedOperationError, match=f"{kernel} has no fused row-sums"):
            ops.matmul_with_kernel(kernel, a, b, a_row_sums=sums)
    bad = [
        (np.zeros(5, np.float16), {}, "shape \\[6\\]"),
        (np.zeros(6, np.float32), {}, "float32"),
        (np.zeros(12, np.float16)[::2], {}, "contiguous"),
        (sums, {"bias": np.zeros(5, np.float16)}, "no bias"),
        (sums, {"activation": "relu"}, "activation"),
    ]
    for out, kwargs, msg in bad:
        with pytest.raises(xrt.InvalidArgumentError, match=msg):
            ops.matmul_with_kernel("cpu_blocked", a, b, a_row_sums=out, **kwargs)
    with pytest.raises(xrt.InvalidArgumentError, match="2-D"):
        ops.matmul_with_kernel("cpu_blocked", _rand((2, 6, 10), "float16"), b, a_row_sums=sums)
    with pytest.raises(xrt.InvalidArgumentError, match="overlaps"):
        ops.matmul_with_kernel("cpu_blocked", a, b, a_row_sums=a.reshape(-1)[:6])
    assert (sums == 7.0).all()  # untouched by every refusal
    _check(ops.matmul_with_kernel("cpu_blocked", a, b), a, b, "float16")  # still usable


@pytest.mark.skipif(BLAS, reason="this build has a CBLAS, so cpu_blas runs")
def test_cpu_blas_without_cblas_refuses_with_the_reason():
    a = _rand((3, 4), "float32")
    with pytest.raises(xrt.UnsupportedOperationError, match="backend_unavailable"):
        ops.matmul(a, a.T.copy(), policy=_policy("cpu_blas"))


def test_cpu_gemm_info_reports_the_build():
    info = ops.cpu_gemm_info()
    assert info["isa"] in ("avx512", "avx2", "portable")
    assert isinstance(info["blas_available"], bool) and info["blas"]


def test_cpu_blas_is_available_in_a_normal_build():
    """A build finds OpenBLAS: the system's (apt) or, without it, scipy-openblas32 from
    PyPI (what `pip install .` gets on a machine without apt's). Only a build
    configured with XRT_BLAS=OFF lacks it. Then the automatic choice for an fp64
    product (fp32 too in a build without oneDNN) is cpu_blas, and its result matches
    NumPy float64 on random shapes."""
    info = ops.cpu_gemm_info()
    if "XRT_BLAS=OFF" in info["blas"]:
        pytest.skip(f"built without BLAS on purpose: {info['blas']}")
    assert info["blas_available"], f"cpu_blas unavailable in a normal build: {info['blas']}"
    assert info["blas"].startswith("OpenBLAS"), info["blas"]
    assert info["blas"].endswith(("[system OpenBLAS]", "[scipy-openblas32 from PyPI]")), info["blas"]
    for dtype in ("float32", "float64"):
        for _ in range(6):
            m, n, k = (int(x) for x in RNG.integers(1, 300, size=3))
            a, b = _rand((m, k), dtype), _rand((k, n), dtype)
            got = ops.matmul(a, b)
            d = ops.last_decision()
            # float32 goes to onednn first where the build has oneDNN.
            onednn = d.candidate("onednn")
            auto = "onednn" if dtype == "float32" and onednn and onednn.verdict == "supported" else "cpu_blas"
            assert d.chosen == auto and d.rule == "auto.first_supported", d.summary()
            _check(got, a, b, dtype)
