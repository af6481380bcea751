"""GPU tests of routed F.linear under matmul="cublasLt" (issue 5): the forward and
all three gradients against a float64 reference on random inputs, fp32/fp16/bf16,
odd widths, 2-D and 3-D inputs; the bias gradient of fp16/bf16 runs on the skinny
kernel (ones @ grad) on compute capability 9.0, and its decision is not routed."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import xpuruntime.pytorch as xrt_torch
from xpuruntime.pytorch.ops import _bridge
from xpuruntime.pytorch.ops.matmul import _column_sums_by_gemm


def _skip_reason() -> str:
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    return _bridge.cuda_kernels_unavailable() or _bridge.capability_problem(0)


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_skip_reason()), reason=_skip_reason() or "ok")]
# Relative (Frobenius) error bounds against float64: the products accumulate in fp32.
TOL = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 2e-2}


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want).norm() / want.norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"]
)
@pytest.mark.parametrize("shape", [(7, 33, 65), (2, 300, 128, 77), (4096, 768, 3072), (1, 1, 16, 8)])
def test_linear_forward_and_gradients_match_float64(dtype, shape):
    *lead, k, n = shape
    g = torch.Generator(device="cuda").manual_seed(sum(shape))
    x = torch.randn(*lead, k, device="cuda", dtype=dtype, generator=g).requires_grad_()
    w = (torch.randn(n, k, device="cuda", dtype=dtype, generator=g) / k**0.5).requires_grad_()
    b = torch.randn(n, device="cuda", dtype=dtype, generator=g).requires_grad_()
    dy = torch.randn(*lead, n, device="cuda", dtype=dtype, generator=g)
    xrt_torch.set_kernel_policy(matmul="cublasLt")
    try:
        y = torch.nn.functional.linear(x, w, b)
        y.backward(dy)
    finally:
        xrt_torch.clear_kernel_policy()
    leaves = [t.detach().double().requires_grad_() for t in (x, w, b)]
    ref = torch.nn.functional.linear(*leaves)
    ref.backward(dy.double())
    assert _rel(y, ref) < TOL[dtype]
    for name, got, want in zip(("x", "w", "b"), (x, w, b), leaves):
        assert got.grad is not None and got.grad.dtype == dtype, name
        assert _rel(got.grad, want.grad) < TOL[dtype], f"d{name}"
    assert w.grad.is_contiguous() and b.grad.shape == (n,)
    rows = 1
    for d in lead:
        rows *= d
    expect = dtype != torch.float32 and rows >= 2 and torch.cuda.get_device_capability(0) == (9, 0)
    assert _column_sums_by_gemm(dy.reshape(-1, n)) == expect
