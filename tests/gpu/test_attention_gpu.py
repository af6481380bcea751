"""GPU tests of our FlashAttention-2 kernels through xpuruntime.pytorch (issue 5).

Forward and backward of ``fused_attention`` against a float64 PyTorch reference
on fresh random inputs (relative error ||out - ref|| / ||ref|| within 2e-2 for
bf16 and 5e-3 for fp16), over batch, heads, sequence lengths (1, 127, 1000 and
4096 included), head dims, causal and non-causal, GQA, boolean and additive
masks, and dropout (its mask reproduced by the NumPy Philox mirror). Plus CUDA
graph capture/replay, outputs poisoned before each run, and the fallback of an
unsupported head dimension. Skips with the reason where no usable GPU exists.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import xpuruntime.pytorch as xrt_torch
from xpuruntime.pytorch.ops import _bridge, _philox
from xpuruntime.pytorch.ops.attention import flash_attn_bwd, flash_attn_fwd


def _skip_reason() -> str:
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    why = _bridge.cuda_kernels_unavailable()
    if why:
        return why
    return _bridge.capability_problem(0)


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_skip_reason()), reason=_skip_reason() or "ok")]
TOL = {torch.bfloat16: 2e-2, torch.float16: 5e-3}


def _rel(a, b):
    """||a - b|| / ||b||, with an RMS floor of 1e-2 per element for the denominator:
    gradients that are exactly zero in exact arithmetic (one visible key) come out
    as rounding residue (~1e-7) and have no meaningful relative error."""
    a, b = a.double(), b.double()
    assert torch.isfinite(a).all(), "non-finite values in the kernel output"
    floor = 1e-2 * b.numel() ** 0.5
    return ((a - b).norm() / b.norm().clamp_min(floor)).item()


def _inputs(B, Hq, Hkv, Sq, Sk, D, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=dtype, generator=g)
    return mk(B, Hq, Sq, D), mk(B, Hkv, Sk, D), mk(B, Hkv, Sk, D), mk(B, Hq, Sq, D)


def _reference(q, k, v, mask, causal, scale, keep=None, p=0.0):
    """float64 reference with autograd leaves (q, k, v)."""
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    s = (qd @ kd.repeat_interleave(g, 1).transpose(-1, -2)) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.double()
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device="cuda").tril(), float("-inf"))
    probs = torch.softmax(s, -1)
    if keep is not None:
        probs = probs * keep / (1.0 - p)
    return probs @ vd.repeat_interleave(g, 1), (qd, kd, vd), torch.logsumexp(s, -1)


def _check(q, k, v, dout, mask=None, causal=False, p=0.0, seed=0):
    B, Hq, Sq, D = q.shape
    Sk = k.shape[2]
    scale = D**-0.5
    rng = torch.tensor([1234 + seed, 7], device="cuda", dtype=torch.int64) if p > 0 else None
    keep = None
    if p > 0:
        keep = torch.from_numpy(_philox.dropout_keep_mask(B, Hq, Sq, Sk, p, 1234 + seed, 7)).cuda()
    out, lse = flash_attn_fwd(q, k, v, mask, p, causal, scale, rng)
    ref, leaves, ref_lse = _reference(q, k, v, mask, causal, scale, keep, p)
    tol = TOL[q.dtype]
    assert _rel(out, ref) < tol
    assert (lse.double() - ref_lse).abs().max().item() < 1e-2
    dq, dk, dv = flash_attn_bwd(dout, q, k, v, out, lse, mask, p, causal, scale, rng)
    ref.backward(dout.double())
    for name, got, want in zip("qkv", (dq, dk, dv), leaves):
        assert got.shape == want.shape
        assert _rel(got, want.grad) < tol, f"d{name}"


GRID = [  # B, Hq, Hkv, Sq, Sk
    (1, 2, 2, 1, 1),
    (2, 3, 3, 127, 127),
    (1, 4, 4, 1000, 1000),
    (1, 2, 2, 4096, 4096),
    (2, 8, 2, 333, 1000),  # GQA, Sq != Sk
    (1, 4, 1, 1000, 127),  # MQA, Sk < Sq
    (3, 2, 2, 1, 4096),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", GRID, ids=lambda s: "x".join(map(str, s)))
def test_forward_backward_match_float64(shape, D, causal, dtype):
    q, k, v, dout = _inputs(*shape, D, dtype, seed=hash((shape, D, causal)) % 1000)
    _check(q, k, v, dout, causal=causal)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("mask_kind", ["none", "bool", "additive"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
    "shape", GRID + [(4, 1, 1, 3136, 49), (2, 5, 5, 196, 49)], ids=lambda s: "x".join(map(str, s))
)
def test_head_dim_32_forward_matches_float64(shape, causal, mask_kind, dtype):
    """Head dim 32 (PVT's and Swin's heads) has a forward kernel only: the portable
    mma.sync kernel on every architecture, with the 64-byte-row swizzle. Output and
    logsumexp against float64, masks included (PVT's shape: 3136 queries, 49 keys)."""
    B, Hq, _, Sq, Sk = shape
    q, k, v, _ = _inputs(*shape, 32, dtype, seed=hash((shape, causal, mask_kind)) % 1000)
    g = torch.Generator(device="cuda").manual_seed(Sq + Sk)
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(B, 1, Sq, Sk, device="cuda", generator=g) > 0.3
        mask[..., 0] = True
    elif mask_kind == "additive":
        mask = torch.randn(1, Hq, Sq, Sk, device="cuda", generator=g)
    out, lse = flash_attn_fwd(q, k, v, mask, 0.0, causal, 32**-0.5, None)
    ref, _, ref_lse = _reference(q, k, v, mask, causal, 32**-0.5)
    assert _rel(out, ref) < TOL[dtype]
    assert (lse.double() - ref_lse).abs().max().item() < 1e-2


def test_head_dim_32_backward_is_refused_and_autograd_falls_back():
    """No backward kernel takes head dim 32: the kernel entry refuses it with a typed
    error, and fused_attention on tensors that require grad falls back to torch (the
    decision says why) with correct gradients; without grad it runs flash_v2."""
    q, k, v, dout = _inputs(2, 2, 2, 100, 100, 32, torch.float16, seed=8)
    out, lse = flash_attn_fwd(q, k, v, None, 0.0, False, 32**-0.5, None)
    with pytest.raises(Exception, match="backward: head_dim 32"):
        flash_attn_bwd(dout, q, k, v, out, lse, None, 0.0, False, 32**-0.5, None)
    xrt_torch.clear_decision_log()
    with torch.no_grad():
        plain = xrt_torch.ops.fused_attention(q, k, v)
    assert torch.equal(plain, out)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    got = xrt_torch.ops.fused_attention(*leaves)
    got.backward(dout)
    ref, ref_leaves, _ = _reference(q, k, v, None, False, 32**-0.5)
    ref.backward(dout.double())
    assert _rel(got, ref) < TOL[torch.float16]
    for t, want in zip(leaves, ref_leaves):
        assert _rel(t.grad, want.grad) < 2e-2
    d = xrt_torch.decision_log()[-1]
    assert d.rule == "fallback" and "with a backward pass" in d.candidates[0].detail


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_masks(kind, dtype):
    q, k, v, dout = _inputs(2, 4, 2, 200, 333, 128, dtype, seed=3)
    g = torch.Generator(device="cuda").manual_seed(9)
    if kind == "bool":
        mask = torch.rand(2, 1, 200, 333, device="cuda", generator=g) > 0.3
        mask[..., 0] = True
    else:
        mask = torch.randn(1, 4, 200, 333, device="cuda", generator=g)
    _check(q, k, v, dout, mask=mask)


@pytest.mark.parametrize("causal", [False, True])
def test_dropout_matches_philox_reference(causal):
    q, k, v, dout = _inputs(2, 4, 2, 300, 300, 64, torch.bfloat16, seed=5)
    _check(q, k, v, dout, causal=causal, p=0.2, seed=11)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
    "shape",
    [(1, 2, 2, 1, 1), (2, 4, 2, 127, 1000), (1, 2, 1, 1000, 4096), (2, 2, 2, 4096, 129)],
    ids=lambda s: "x".join(map(str, s)),
)
def test_plain_path_matches_masked_path(shape, D, causal, dtype):
    """On Hopper the plain forward (no mask, no dropout) runs the wgmma kernel and any
    mask the mma.sync kernel: an all-zero additive mask gives the same function, so
    the two kernels must agree on O and lse (sequence-major q/k/v/out views too)."""
    B, Hq, Hkv, Sq, Sk = shape
    g = torch.Generator(device="cuda").manual_seed(Sq + Sk + D)
    mk = lambda H, S: torch.randn(B, S, H, D, device="cuda", dtype=dtype, generator=g).transpose(1, 2)
    q, k, v = mk(Hq, Sq), mk(Hkv, Sk), mk(Hkv, Sk)
    zero = torch.zeros(1, 1, 1, 1, device="cuda", dtype=torch.float32)
    out, lse = flash_attn_fwd(q, k, v, None, 0.0, causal, D**-0.5, None)
    out_mma, lse_mma = flash_attn_fwd(q, k, v, zero, 0.0, causal, D**-0.5, None)
    ref, _, ref_lse = _reference(q, k, v, None, causal, D**-0.5)
    assert _rel(out, ref) < TOL[dtype]
    assert _rel(out, out_mma) < TOL[dtype]
    assert (lse.double() - ref_lse).abs().max().item() < 1e-2
    assert (lse - lse_mma).abs().max().item() < 1e-3


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
    "shape",
    [(1, 2, 2, 1, 1), (2, 4, 2, 127, 1000), (1, 2, 1, 1000, 4096), (2, 2, 2, 4096, 129), (1, 3, 3, 200, 64)],
    ids=lambda s: "x".join(map(str, s)),
)
def test_plain_backward_matches_masked_path(shape, D, causal, dtype):
    """On Hopper the plain backward runs the wgmma kernel (with its own dQ
    accumulation layout) and any mask the mma.sync kernel: with an all-zero
    additive mask both compute the same gradients, here from sequence-major
    (strided) q/k/v/dout views, into outputs poisoned with NaN beforehand."""
    B, Hq, Hkv, Sq, Sk = shape
    g = torch.Generator(device="cuda").manual_seed(Sq + 3 * Sk + D)
    mk = lambda H, S: torch.randn(B, S, H, D, device="cuda", dtype=dtype, generator=g).transpose(1, 2)
    q, k, v, dout = mk(Hq, Sq), mk(Hkv, Sk), mk(Hkv, Sk), mk(Hq, Sq)
    scale = D**-0.5
    out, lse = flash_attn_fwd(q, k, v, None, 0.0, causal, scale, None)
    torch.cuda.empty_cache()
    poison = torch.full((8 * B * Hq * max(Sq, Sk) * D,), float("nan"), device="cuda", dtype=dtype)
    del poison  # the caching allocator hands the NaN block to the gradients
    grads = flash_attn_bwd(dout, q, k, v, out, lse, None, 0.0, causal, scale, None)
    zero = torch.zeros(1, 1, 1, 1, device="cuda", dtype=torch.float32)
    grads_mma = flash_attn_bwd(dout, q, k, v, out, lse, zero, 0.0, causal, scale, None)
    ref, leaves, _ = _reference(q, k, v, None, causal, scale)
    ref.backward(dout.double())
    for name, got, mma, want in zip("qkv", grads, grads_mma, leaves):
        assert _rel(got, want.grad) < TOL[dtype], f"d{name}"
        assert _rel(got, mma) < TOL[dtype], f"d{name} vs the mma.sync kernel"


def test_every_output_element_is_written():
    q, k, v, _ = _inputs(1, 2, 2, 130, 77, 128, torch.float16, seed=1)
    for _ in range(2):  # the caching allocator hands back the poisoned block
        torch.cuda.empty_cache()
        poison = torch.full((1, 2, 130, 128), float("nan"), device="cuda", dtype=torch.float16)
        del poison
        out, lse = flash_attn_fwd(q, k, v, None, 0.0, True, 0.125, None)
        assert torch.isfinite(out).all() and torch.isfinite(lse).all()


def test_public_api_autograd_and_unsupported_head_dim_fallback():
    q, k, v, dout = _inputs(2, 4, 4, 65, 65, 128, torch.bfloat16, seed=2)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = xrt_torch.ops.fused_attention(*leaves, is_causal=True)
    out.backward(dout)
    ref = F.scaled_dot_product_attention(*(t.double() for t in (q, k, v)), is_causal=True)
    assert _rel(out, ref) < 2e-2
    assert all(t.grad is not None for t in leaves)
    xrt_torch.clear_decision_log()
    q96 = torch.randn(1, 2, 16, 96, device="cuda", dtype=torch.bfloat16)
    out96 = xrt_torch.ops.fused_attention(q96, q96, q96)
    assert _rel(out96, F.scaled_dot_product_attention(q96.double(), q96.double(), q96.double())) < 2e-2
    d = xrt_torch.decision_log()[-1]
    assert d.rule == "fallback" and d.candidates[0].reason_code == "shape_unsupported"


def test_cuda_graph_capture_replays_fresh_inputs():
    q, k, v, _ = _inputs(2, 4, 4, 256, 256, 64, torch.bfloat16, seed=4)
    static = [t.clone() for t in (q, k, v)]
    out_static = xrt_torch.ops.fused_attention(*static, is_causal=True)  # warm-up outside capture
    with xrt_torch.capture_graph() as graph:
        out_static = xrt_torch.ops.fused_attention(*static, is_causal=True)
    for seed in range(3):
        fresh = _inputs(2, 4, 4, 256, 256, 64, torch.bfloat16, seed=100 + seed)[:3]
        for s, f in zip(static, fresh):
            s.copy_(f)
        graph.replay()
        eager = xrt_torch.ops.fused_attention(*fresh, is_causal=True)
        assert torch.equal(out_static, eager)  # same kernels, same inputs: the same bits


def test_dropout_under_graph_replay_draws_new_masks():
    q, k, v, _ = _inputs(1, 2, 2, 128, 128, 64, torch.bfloat16, seed=6)
    xrt_torch.ops.fused_attention(q, k, v, dropout_p=0.5)
    with xrt_torch.capture_graph() as graph:
        out = xrt_torch.ops.fused_attention(q, k, v, dropout_p=0.5)
    graph.replay()
    first = out.clone()
    graph.replay()
    assert not torch.equal(first, out)


@pytest.mark.parametrize("kind", ["none", "bool", "dropout"])
def test_eager_paths_match_the_custom_op(kind):
    """fused_attention in eager mode calls the kernels directly (no custom-op
    dispatch); with and without autograd it gives the custom ops' results bit for
    bit, masks and dropout included, and GQA gradients are summed the same way."""
    q, k, v, _ = _inputs(2, 4, 2, 200, 200, 64, torch.bfloat16, seed=11)
    dout = torch.randn_like(q)
    mask = torch.rand(200, 200, device="cuda") > 0.3 if kind == "bool" else None
    p = 0.25 if kind == "dropout" else 0.0
    rng = torch.tensor([1234, 0], device="cuda", dtype=torch.int64) if p else None
    sc = 64**-0.5
    out_op, lse = flash_attn_fwd(q, k, v, mask, p, False, sc, rng)
    dq_op, dk_op, dv_op = flash_attn_bwd(dout, q, k, v, out_op, lse, mask, p, False, sc, rng)
    from xpuruntime.pytorch.ops.attention import attention_forward

    with torch.no_grad():
        assert torch.equal(attention_forward(q, k, v, mask, p, False, sc, rng), out_op)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = attention_forward(*leaves, mask, p, False, sc, rng)
    assert torch.equal(out, out_op)
    out.backward(dout)
    for got, want in zip((t.grad for t in leaves), (dq_op, dk_op, dv_op)):
        assert torch.equal(got, want)


def test_eager_path_keeps_sequence_major_layouts():
    """q, k, v split from a fused [B, S, 3*C] projection (sequence-major memory): the
    eager path stores the output and the gradients sequence-major too, so the model's
    transposes back are views; values equal the custom op's bit for bit."""
    B, S, H, D = 2, 300, 4, 64
    g = torch.Generator(device="cuda").manual_seed(21)
    qkv = torch.randn(B, S, 3 * H * D, device="cuda", dtype=torch.bfloat16, generator=g)
    dout = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16, generator=g).transpose(1, 2)

    def split(t):
        return [x.view(B, S, H, D).transpose(1, 2) for x in t.split(H * D, dim=2)]

    q, k, v = split(qkv)
    out_op, lse = flash_attn_fwd(q, k, v, None, 0.0, True, D**-0.5, None)
    grads_op = flash_attn_bwd(dout.contiguous(), q, k, v, out_op, lse, None, 0.0, True, D**-0.5, None)
    leaf = qkv.clone().requires_grad_()
    ql, kl, vl = split(leaf)
    seen = [None, None, None]
    for i, t in enumerate((ql, kl, vl)):
        t.register_hook(lambda grad, i=i: seen.__setitem__(i, grad))
    out = xrt_torch.ops.fused_attention(ql, kl, vl, is_causal=True)
    assert out.transpose(1, 2).is_contiguous()  # stored [B, S, H, D]
    assert torch.equal(out, out_op)
    out.backward(dout)
    for got, want in zip(seen, grads_op):
        assert got.transpose(1, 2).is_contiguous() and torch.equal(got, want)
