"""xpuruntime.pytorch ops on CPU torch (issue 5): fused_attention and fused_layernorm
through their CPU reference paths — forward against torch in float64, gradcheck of
our backward formulas, opcheck of the custom-op registrations, dropout
reproducibility against the Philox mirror, and torch.compile without graph breaks.
The CUDA kernels themselves are tested in tests/gpu/test_attention_gpu.py.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import xpuruntime.pytorch as xrt_torch
from xpuruntime.pytorch.ops import _philox
from xpuruntime.pytorch.ops.attention import flash_attn_bwd, flash_attn_fwd
from xpuruntime.pytorch.ops.layernorm import layer_norm_bwd, layer_norm_fwd

ops = xrt_torch.ops


def _qkv(B, Hq, Hkv, Sq, Sk, D, dtype=torch.float64, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hq, Sq, D, generator=g, dtype=dtype)
    k = torch.randn(B, Hkv, Sk, D, generator=g, dtype=dtype)
    v = torch.randn(B, Hkv, Sk, D, generator=g, dtype=dtype)
    return tuple(t.requires_grad_(grad) for t in (q, k, v))


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


# ---- Philox mirror -------------------------------------------------------------------------
def test_philox_matches_random123_known_answers():
    r = _philox.philox4x32_10(0, 0, 0, 0, 0, 0)
    assert [int(x) for x in r] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    f = 0xFFFFFFFF
    r = _philox.philox4x32_10(f, f, f, f, f, f)
    assert [int(x) for x in r] == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]


def test_dropout_mask_is_a_pure_function_with_the_right_rate():
    m1 = _philox.dropout_keep_mask(2, 3, 64, 200, 0.25, 12345, 9)
    m2 = _philox.dropout_keep_mask(2, 3, 64, 200, 0.25, 12345, 9)
    m3 = _philox.dropout_keep_mask(2, 3, 64, 200, 0.25, 12345, 10)
    assert np.array_equal(m1, m2)
    assert not np.array_equal(m1, m3)
    assert abs(m1.mean() - 0.75) < 0.01
    # a sub-block is the same function evaluated on fewer columns
    small = _philox.dropout_keep_mask(2, 3, 64, 13, 0.25, 12345, 9)
    assert np.array_equal(small, m1[..., :13])


# ---- fused_attention: forward vs torch -----------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "shape", [(2, 4, 4, 7, 7, 16), (1, 4, 2, 5, 9, 8), (2, 2, 1, 1, 6, 8), (1, 2, 2, 9, 3, 8)]
)
def test_fused_attention_matches_torch_sdpa_float64(shape, causal):
    B, Hq, Hkv, Sq, _Sk, D = shape
    q, k, v = _qkv(*shape, seed=sum(shape))
    out = ops.fused_attention(q, k, v, is_causal=causal)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=Hq != Hkv)
    assert out.shape == (B, Hq, Sq, D)
    assert _rel(out, ref) < 1e-12


@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_fused_attention_masks_match_torch(kind):
    q, k, v = _qkv(2, 3, 3, 6, 10, 8, seed=3)
    g = torch.Generator().manual_seed(5)
    if kind == "bool":
        mask = torch.rand(2, 1, 6, 10, generator=g) > 0.4
        mask[..., 0] = True
    else:
        mask = torch.randn(1, 3, 6, 10, generator=g, dtype=torch.float64)
    out = ops.fused_attention(q, k, v, attn_mask=mask, scale=0.3)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)
    assert _rel(out, ref) < 1e-12


def test_fused_attention_float32_and_3d_inputs():
    q, k, v = _qkv(1, 2, 2, 5, 5, 8, dtype=torch.float32, seed=8)
    out = ops.fused_attention(q[0], k[0], v[0])
    ref = F.scaled_dot_product_attention(q[0], k[0], v[0])
    assert out.shape == (2, 5, 8)
    assert _rel(out, ref) < 1e-5


def test_fused_attention_rejects_mask_with_causal():
    q, k, v = _qkv(1, 1, 1, 3, 3, 4)
    with pytest.raises(ValueError, match="attn_mask or is_causal"):
        ops.fused_attention(q, k, v, attn_mask=torch.ones(3, 3, dtype=torch.bool), is_causal=True)


# ---- fused_attention: backward formulas ------------------------------------------------------
@pytest.mark.parametrize(
    "causal,mask_kind,shape",
    [
        (False, None, (1, 2, 2, 4, 5, 4)),
        (True, None, (1, 2, 2, 5, 5, 4)),
        (False, None, (1, 4, 2, 3, 4, 4)),  # GQA
        (False, "bool", (2, 2, 2, 3, 4, 4)),
        (False, "additive", (1, 2, 1, 4, 3, 4)),
    ],
)
def test_fused_attention_gradcheck_float64(causal, mask_kind, shape):
    q, k, v = _qkv(*shape, seed=11, grad=True)
    B, Hq, _, Sq, Sk, _ = shape
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(B, 1, Sq, Sk, generator=torch.Generator().manual_seed(1)) > 0.3
        mask[..., 0] = True
    elif mask_kind == "additive":
        mask = torch.randn(Hq, Sq, Sk, generator=torch.Generator().manual_seed(2), dtype=torch.float64)

    def fn(q, k, v):
        return ops.fused_attention(q, k, v, attn_mask=mask, is_causal=causal)

    assert torch.autograd.gradcheck(fn, (q, k, v), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_fused_attention_gradcheck_with_dropout():
    q, k, v = _qkv(1, 2, 2, 4, 9, 4, seed=21, grad=True)
    rng = torch.tensor([987654321, 3], dtype=torch.int64)

    def fn(q, k, v):
        return flash_attn_fwd(q, k, v, None, 0.3, False, 0.5, rng)[0]

    assert torch.autograd.gradcheck(fn, (q, k, v), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_dropout_applies_the_philox_mask_exactly():
    q, k, v = _qkv(2, 2, 2, 5, 11, 4, seed=4)
    seed, offset, p = 2**40 + 17, 5, 0.4
    rng = torch.tensor([seed, offset], dtype=torch.int64)
    out, lse = flash_attn_fwd(q, k, v, None, p, False, 0.5, rng)
    keep = torch.from_numpy(_philox.dropout_keep_mask(2, 2, 5, 11, p, seed, offset))
    probs = torch.softmax((q @ k.transpose(-1, -2)) * 0.5, dim=-1)
    ref = (probs * keep / (1 - p)) @ v
    assert _rel(out, ref) < 1e-12
    assert _rel(lse, torch.logsumexp((q @ k.transpose(-1, -2)) * 0.5, -1)) < 1e-12


def test_dropout_is_reproducible_under_manual_seed():
    q, k, v = _qkv(1, 2, 2, 8, 8, 4, seed=6)
    torch.manual_seed(123)
    a = ops.fused_attention(q, k, v, dropout_p=0.5)
    torch.manual_seed(123)
    b = ops.fused_attention(q, k, v, dropout_p=0.5)
    c = ops.fused_attention(q, k, v, dropout_p=0.5)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_attention_backward_op_matches_autograd_of_reference():
    q, k, v = _qkv(2, 4, 2, 6, 7, 8, seed=9, grad=True)
    dout = torch.randn(2, 4, 6, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    out, lse = flash_attn_fwd(q, k, v, None, 0.0, True, 0.35, None)
    dq, dk, dv = flash_attn_bwd(dout, q, k, v, out, lse, None, 0.0, True, 0.35, None)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.35, enable_gqa=True)
    rq, rk, rv = torch.autograd.grad(ref, (q, k, v), dout)
    for a, b in ((dq, rq), (dk, rk), (dv, rv)):
        assert _rel(a, b) < 1e-12


def test_attention_opcheck():
    q, k, v = _qkv(1, 2, 1, 3, 5, 4, dtype=torch.float32, seed=2, grad=True)
    mask = torch.rand(1, 1, 3, 5, generator=torch.Generator().manual_seed(3)) > 0.2
    mask[..., 0] = True
    torch.library.opcheck(flash_attn_fwd, (q, k, v, mask, 0.0, False, 0.5, None))
    rng = torch.tensor([7, 8], dtype=torch.int64)
    torch.library.opcheck(flash_attn_fwd, (q, k, v, None, 0.2, True, 0.5, rng))
    out, lse = flash_attn_fwd(q, k, v, None, 0.0, False, 0.5, None)
    dout = torch.randn_like(out)
    args = (dout, q.detach(), k.detach(), v.detach(), out.detach(), lse.detach(), None, 0.0, False, 0.5, None)
    torch.library.opcheck(flash_attn_bwd, args)


# ---- fused_layernorm ------------------------------------------------------------------------------
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape,norm", [((3, 5, 8), (8,)), ((4, 6), (6,)), ((2, 3, 4), (3, 4))])
def test_fused_layernorm_matches_torch_and_gradcheck(shape, norm, affine):
    g = torch.Generator().manual_seed(len(shape) + len(norm))
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * 2 + 0.5).requires_grad_()
    w = torch.randn(norm, generator=g, dtype=torch.float64).requires_grad_() if affine else None
    b = torch.randn(norm, generator=g, dtype=torch.float64).requires_grad_() if affine else None
    y = ops.fused_layernorm(x, norm, w, b, eps=1e-5)
    assert _rel(y, F.layer_norm(x, norm, w, b, 1e-5)) < 1e-12
    inputs = (x, w, b) if affine else (x,)

    def fn(*t):
        return ops.fused_layernorm(t[0], norm, *(t[1:] if affine else (None, None)), eps=1e-5)

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2), (torch.float16, 2e-3)])
def test_fused_layernorm_low_precision_uses_fp32_statistics(dtype, tol):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(16, 64, generator=g) * 3 + 100).to(dtype)  # a large mean: fp32 stats matter
    w = torch.randn(64, generator=g).to(dtype)
    b = torch.randn(64, generator=g).to(dtype)
    y, mean, rstd = layer_norm_fwd(x, [64], w, b, 1e-5)
    assert mean.dtype == torch.float32 and rstd.dtype == torch.float32 and mean.shape == (16,)
    ref = F.layer_norm(x.double(), (64,), w.double(), b.double(), 1e-5)
    assert y.dtype == dtype
    assert _rel(y, ref) < tol


def test_layernorm_opcheck():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 4, 8, generator=g, requires_grad=True)
    w = torch.randn(8, generator=g, requires_grad=True)
    b = torch.randn(8, generator=g, requires_grad=True)
    torch.library.opcheck(layer_norm_fwd, (x, [8], w, b, 1e-5))
    torch.library.opcheck(layer_norm_fwd, (x, [4, 8], None, None, 1e-5))
    y, mean, rstd = layer_norm_fwd(x.detach(), [8], w.detach(), b.detach(), 1e-5)
    torch.library.opcheck(
        layer_norm_bwd, (torch.randn_like(y), x.detach(), [8], mean, rstd, w.detach(), True, True)
    )


def test_fused_layernorm_falls_back_with_a_recorded_reason():
    xrt_torch.clear_decision_log()
    x = torch.randn(4, 8, dtype=torch.float32)
    w = torch.randn(8, dtype=torch.float64)  # mixed dtypes: not ours
    with pytest.raises(RuntimeError):
        F.layer_norm(x, (8,), w)  # torch rejects it too; the fallback runs torch's code
    with pytest.raises(RuntimeError):
        ops.fused_layernorm(x, 8, w)
    d = [d for d in xrt_torch.decision_log() if d.op == "layernorm"][-1]
    assert d.rule == "fallback" and d.chosen == "torch"
    assert d.candidates[0].reason_code == "dtype_unsupported"


# ---- torch.compile -------------------------------------------------------------------------
class _Block(torch.nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln_w = torch.nn.Parameter(torch.ones(dim))
        self.ln_b = torch.nn.Parameter(torch.zeros(dim))
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        B, S, C = x.shape
        h = ops.fused_layernorm(x, (C,), self.ln_w, self.ln_b)
        q, k, v = self.qkv(h).split(C, dim=-1)
        q, k, v = (t.view(B, S, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        a = ops.fused_attention(q, k, v, is_causal=True)
        return x + self.proj(a.transpose(1, 2).reshape(B, S, C))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_full_graph_forward_and_backward(backend):
    torch.manual_seed(0)
    model = _Block()
    x = torch.randn(2, 7, 32, requires_grad=True)
    eager = model(x)
    eager.sum().backward()
    g_eager = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled = torch.compile(model, backend=backend, fullgraph=True)  # fullgraph: a break raises
    out = compiled(x.detach().requires_grad_())
    out.sum().backward()
    assert _rel(out, eager) < 1e-5
    for p, g in zip(model.parameters(), g_eager):
        assert _rel(p.grad, g) < 1e-4
    explanation = torch._dynamo.explain(model)(x)
    assert explanation.graph_break_count == 0


# ---- xpuruntime::matmul (the op our cuBLASLt/cuBLAS routing runs) --------------------------
@pytest.mark.parametrize(
    "a_shape,b_shape,bias",
    [
        ((5, 7), (7, 3), True),
        ((2, 4, 6), (6, 5), True),
        ((2, 4, 6), (2, 6, 3), False),
        ((3, 1, 4, 5), (2, 5, 6), False),
    ],
)
def test_matmul_op_autograd_formula_gradcheck(a_shape, b_shape, bias):
    from xpuruntime.pytorch.ops.matmul import xrt_matmul

    g = torch.Generator().manual_seed(len(a_shape) * 10 + len(b_shape))
    a = torch.randn(a_shape, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(b_shape, generator=g, dtype=torch.float64, requires_grad=True)
    c = torch.randn(b_shape[-1], generator=g, dtype=torch.float64, requires_grad=True) if bias else None
    out = xrt_matmul(a, b, c, "cublasLt")
    ref = torch.matmul(a, b) + (c if bias else 0)
    assert out.shape == ref.shape and torch.allclose(out, ref)
    inputs = (a, b, c) if bias else (a, b)

    def fn(*t):
        return xrt_matmul(t[0], t[1], t[2] if bias else None, "cublasLt")

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)
    torch.library.opcheck(xrt_matmul, (a.detach().float(), b.detach().float(), None, "cublas"))


def test_column_sums_op_reference_and_opcheck():
    """xpuruntime::column_sums (a routed linear layer's bias gradient; our kernel on
    CUDA): its CPU reference is x.sum(0), its registration passes opcheck, and the
    routed linear's bias gradient on the CPU path matches float64."""
    from xpuruntime.pytorch.ops.matmul import xrt_column_sums, xrt_matmul

    g = torch.Generator().manual_seed(7)
    x = torch.randn(37, 11, generator=g, dtype=torch.float64)
    assert torch.allclose(xrt_column_sums(x), x.sum(0))
    torch.library.opcheck(xrt_column_sums, (x.float(),))
    a = torch.randn(3, 5, 7, generator=g, dtype=torch.float64)
    w = torch.randn(4, 7, generator=g, dtype=torch.float64)
    bias = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(3, 5, 4, generator=g, dtype=torch.float64)
    xrt_matmul(a, w.t(), bias, "cublasLt").backward(dy)
    assert torch.allclose(bias.grad, dy.sum((0, 1)))


def test_matmul_op_linear_weight_gradient_is_contiguous():
    """weight.t() as the right operand (how F.linear is routed): the weight's gradient
    arrives in the weight's layout, so autograd accumulates it without a strided copy."""
    from xpuruntime.pytorch.ops.matmul import xrt_matmul

    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 5, 6, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 6, generator=g, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(4, generator=g, dtype=torch.float64, requires_grad=True)
    dout = torch.randn(2, 5, 4, generator=g, dtype=torch.float64)
    wt = w.t()
    seen = []
    wt.register_hook(seen.append)
    xrt_matmul(x, wt, bias, "cublasLt").backward(dout)
    assert seen[0].t().is_contiguous()  # the op's own gradient, before autograd's transpose
    ref_w = torch.einsum("bso,bsi->oi", dout, x.detach())
    torch.testing.assert_close(w.grad, ref_w, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(x.grad, dout @ w.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(bias.grad, dout.sum((0, 1)), rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda a, b: xrt_matmul(a, b.t(), None, "cublas"), (x, w), eps=1e-6, atol=1e-7, rtol=1e-5
    )


# ---- _core.cuda_kernels: the binding exists in every build --------------------------------
def test_cuda_kernels_binding_validates_and_names_why_it_cannot_run():
    import xpuruntime
    from xpuruntime import _core

    k = _core.cuda_kernels
    args = {
        "shape": (1, 1, 1, 8, 8, 64),
        "q": 0,
        "k": 0,
        "v": 0,
        "out": 0,
        "lse": 0,
        "q_stride": (0, 0, 64),
        "k_stride": (0, 0, 64),
        "v_stride": (0, 0, 64),
        "out_stride": (0, 0, 64),
        "scale": 0.125,
        "causal": False,
    }
    with pytest.raises(xpuruntime.InvalidArgumentError, match="float16"):
        k.flash_attention_forward(dtype="float32", **args)
    why = k.unavailable_reason()
    if why:  # a CPU-only build: the same functions, refusing with the reason
        with pytest.raises(xpuruntime.BackendUnavailableError, match="CUDA"):
            k.flash_attention_forward(dtype="bfloat16", **args)
        with pytest.raises(xpuruntime.BackendUnavailableError):
            k.layernorm_backward_workspace_bytes(dtype="float32", rows=4, cols=8)
    else:  # the plugin is here: its own validation answers (null pointers)
        with pytest.raises(xpuruntime.InvalidArgumentError, match="null"):
            k.flash_attention_forward(dtype="bfloat16", **args)
