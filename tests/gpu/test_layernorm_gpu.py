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
from xpuruntime.pytorch.ops.layernorm import layer_norm_bwd, layer_norm_fwd


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


# ---- launch configurations (benchmarks/sweep_layernorm.py) and the eager fast path -------------
def _plugin():
    """The plugin's LayerNorm configuration entry points (through _core.cuda_kernels)."""
    from xpuruntime import _core

    return _core.cuda_kernels


def _set_config(kernels, spec: str) -> None:
    kernels.layernorm_set_config(spec)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("rows,cols", [(37, 768), (301, 4096), (5, 1024)])
def test_every_forward_configuration_matches_float64(rows, cols, dtype):
    """Every threads-per-row / grid / prefetch / hint variant (and every backward
    threads-per-row) is right on every row: rows not a multiple of the rows per CTA,
    grids smaller and larger than the rows."""
    lib = _plugin()
    g = torch.Generator(device="cuda").manual_seed(rows + cols)
    x = (torch.randn(rows, cols, device="cuda", generator=g) * 3 + 20).to(dtype)
    w = torch.randn(cols, device="cuda", generator=g).to(dtype)
    b = torch.randn(cols, device="cuda", generator=g).to(dtype)
    dy = torch.randn(rows, cols, device="cuda", generator=g).to(dtype)
    xd, wd, bd = (t.double().requires_grad_() for t in (x, w, b))
    ref = F.layer_norm(xd, (cols,), wd, bd, 1e-5)
    ref.backward(dy.double())
    n_vec = cols * x.element_size() // 16
    tested = 0
    try:
        for tpr in (32, 64, 128, 256, 512, 1024):
            if -(-n_vec // tpr) > 4:
                continue
            for grid in ("persistent", "tile"):
                for prefetch in (0, 1):
                    for hint in ("default", "cs", "nol1"):
                        _set_config(
                            lib, f"tpr={tpr},grid={grid},prefetch={prefetch},hint={hint},bwd_tpr={tpr}"
                        )
                        y, mean, rstd = layer_norm_fwd(x, [cols], w, b, 1e-5)
                        assert _rel(y, ref) < TOL[dtype], (tpr, grid, prefetch, hint)
                        assert _rel(mean, x.double().mean(-1)) < 1e-6
                        tested += 1
            # the backward variant of this threads-per-row
            dx, dw, db = layer_norm_bwd(dy, x, [cols], mean, rstd, w, True, True)
            for got, want in zip((dx, dw, db), (xd.grad, wd.grad, bd.grad)):
                assert _rel(got, want) < TOL[dtype], ("backward", tpr)
    finally:
        _set_config(lib, "")
    assert tested >= 12


def test_bad_configuration_is_rejected():
    from xpuruntime import _core

    kernels = _plugin()
    with pytest.raises(_core.InvalidArgumentError, match="power of two"):
        kernels.layernorm_set_config("tpr=48")
    with pytest.raises(_core.InvalidArgumentError):
        kernels.layernorm_set_config("grid=sideways")


def test_eager_paths_match_the_custom_op():
    """fused_layernorm without autograd (no statistics written) and through the
    direct autograd.Function give the custom op's results bit for bit."""
    x = torch.randn(65, 1024, device="cuda", dtype=torch.bfloat16) + 3
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    y_op, mean, rstd = layer_norm_fwd(x, [1024], w, b, 1e-5)
    with torch.no_grad():
        assert torch.equal(xrt_torch.ops.fused_layernorm(x, 1024, w, b), y_op)
    dx_op, dw_op, db_op = layer_norm_bwd(dy, x, [1024], mean, rstd, w, True, True)
    xg, wg, bg = (t.clone().requires_grad_() for t in (x, w, b))
    y = xrt_torch.ops.fused_layernorm(xg, 1024, wg, bg)
    assert torch.equal(y, y_op)
    y.backward(dy)
    assert torch.equal(xg.grad, dx_op) and torch.equal(wg.grad, dw_op) and torch.equal(bg.grad, db_op)
