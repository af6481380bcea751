"""GPU tests of our fused LayerNorm kernels through xpuruntime.pytorch (issue 5).

Forward (y, fp32 mean/rstd) and backward (dx, dweight, dbias) against float64
PyTorch on fresh random inputs with a large mean (fp32 statistics matter), for
float32/float16/bfloat16, row lengths that take the register path (768, 1024,
4096, 8192), odd ones that take the scalar path (1000, 20) and a row too long
for registers (40000), with and without weight/bias.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import xpuruntime.pytorch as xrt_torch
from xpuruntime.pytorch.ops import _bridge
from xpuruntime.pytorch.ops.layernorm import layer_norm_fwd


def _skip_reason() -> str:
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    return _bridge.cuda_kernels_unavailable() or _bridge.capability_problem(0)


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_skip_reason()), reason=_skip_reason() or "ok")]
TOL = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 2e-2}


def _rel(a, b):
    a, b = a.double(), b.double()
    assert torch.isfinite(a).all()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"]
)
@pytest.mark.parametrize(
    "rows,cols", [(1, 1), (7, 768), (64, 1024), (33, 4096), (300, 8192), (5, 1000), (4, 20), (3, 40000)]
)
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_layernorm_forward_backward_match_float64(rows, cols, dtype, affine):
    g = torch.Generator(device="cuda").manual_seed(rows * 131 + cols)
    x = (torch.randn(rows, cols, device="cuda", generator=g) * 3 + 20).to(dtype).requires_grad_()
    w = torch.randn(cols, device="cuda", generator=g).to(dtype).requires_grad_() if affine else None
    b = torch.randn(cols, device="cuda", generator=g).to(dtype).requires_grad_() if affine else None
    dy = torch.randn(rows, cols, device="cuda", generator=g).to(dtype)
    y = xrt_torch.ops.fused_layernorm(x, (cols,), w, b, eps=1e-5)
    y.backward(dy)
    leaves = [t.detach().double().requires_grad_() for t in (x, w, b) if t is not None]
    ref = F.layer_norm(leaves[0], (cols,), *(leaves[1:] if affine else (None, None)), 1e-5)
    ref.backward(dy.double())
    tol = TOL[dtype]
    assert _rel(y, ref) < tol
    got = [x.grad] + ([w.grad, b.grad] if affine else [])
    for a, r in zip(got, leaves):
        assert _rel(a, r.grad) < tol


def test_statistics_are_fp32_and_saved():
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16) + 50
    _, mean, rstd = layer_norm_fwd(x, [4096], None, None, 1e-5)
    assert mean.dtype == rstd.dtype == torch.float32 and mean.shape == (16,)
    xd = x.double()
    assert _rel(mean, xd.mean(-1)) < 1e-6
    assert _rel(rstd, torch.rsqrt(xd.var(-1, unbiased=False) + 1e-5)) < 1e-5


def test_layernorm_in_captured_graph():
    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    out = xrt_torch.ops.fused_layernorm(x, 1024, w, None)
    with xrt_torch.capture_graph() as graph:
        out = xrt_torch.ops.fused_layernorm(x, 1024, w, None)
    x.copy_(torch.randn_like(x))
    graph.replay()
    assert torch.equal(out, xrt_torch.ops.fused_layernorm(x, 1024, w, None))
