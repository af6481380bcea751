"""``fused_attention`` (seed 002 §5.1): our FlashAttention-2 as torch custom ops.

Two ops live in the ``xpuruntime`` torch.library namespace:

* ``xpuruntime::flash_attn_fwd(q, k, v, attn_mask, dropout_p, is_causal, scale,
  rng_state) -> (out, lse)``
* ``xpuruntime::flash_attn_bwd(dout, q, k, v, out, lse, attn_mask, dropout_p,
  is_causal, scale, rng_state) -> (dq, dk, dv)``

Each has a CUDA kernel (our kernels through ``_core.cuda_kernels``), a CPU
reference implementation (any floating dtype, float64 included, so
``torch.autograd.gradcheck`` checks the backward formula), a fake implementation
(shapes only, for ``torch.compile`` and meta tensors) and the forward carries an
autograd formula that calls the backward op. Both run inside CUDA graph capture:
they allocate through torch and launch on torch's current stream, and dropout
reads its seed and offset from a device tensor drawn from torch's generator.

Semantics follow ``torch.nn.functional.scaled_dot_product_attention``: q
``[B, Hq, Sq, D]``, k/v ``[B, Hkv, Sk, D]`` with ``Hq % Hkv == 0`` (grouped-query
attention), a boolean mask (True = attend) or an additive float mask broadcastable
to ``[B, Hq, Sq, Sk]``, ``is_causal`` top-left aligned (key j visible to query i
iff j <= i), ``scale`` defaulting to ``1/sqrt(D)``. A query row that sees no key
gives zeros (torch's math backend gives NaN there).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ... import _core
from .._log import record_direct_fallback
from . import _bridge
from ._philox import dropout_keep_mask

__all__ = ["attention_forward", "flash_attention_support", "fused_attention"]

R = _core.reason  # reason codes, declared in C++ (kernel_registry.h)


# ---- support ------------------------------------------------------------------------
def flash_attention_support(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[str, str] | None:
    """Why ``flash_v2`` cannot run this case: ``(reason_code, detail)``, or None when it can.

    The call itself must make sense (shapes that match, a mask that broadcasts, a
    dropout probability in [0, 1)); then CPU tensors run the reference implementation,
    and on another device the registry's ``flash_v2`` KernelDef says whether our kernel
    runs the case (its dtypes, head dimensions, size limits, capability): the C++
    definition the Dispatcher checks, not a Python copy of it.
    """
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return R.SHAPE_UNSUPPORTED, "query/key/value must be 4-D [batch, heads, seq, head_dim]"
    if not (query.device == key.device == value.device):
        return R.DEVICE_MISMATCH, "query, key and value are on different devices"
    if not (query.dtype == key.dtype == value.dtype):
        return R.DTYPE_UNSUPPORTED, "query, key and value have different dtypes"
    if not query.dtype.is_floating_point:
        return R.DTYPE_UNSUPPORTED, f"{query.dtype} is not a floating dtype"
    B, Hq, Sq, D = query.shape
    if key.shape[0] != B or value.shape[0] != B or key.shape[1] != value.shape[1]:
        return R.SHAPE_UNSUPPORTED, "batch or key/value head counts differ"
    if key.shape[2] != value.shape[2] or key.shape[3] != D or value.shape[3] != D:
        return (
            R.SHAPE_UNSUPPORTED,
            "key/value lengths or head dims do not match query (Ev != E is not supported)",
        )
    if key.shape[1] == 0 or Hq % key.shape[1] != 0:
        return R.SHAPE_UNSUPPORTED, f"query heads {Hq} are not a multiple of key/value heads {key.shape[1]}"
    if Sq == 0 or key.shape[2] == 0 or B == 0 or Hq == 0 or D == 0:
        return R.SHAPE_UNSUPPORTED, "empty batch, heads, sequence or head_dim"
    if attn_mask is not None:
        if attn_mask.dtype != torch.bool and not attn_mask.dtype.is_floating_point:
            return R.DTYPE_UNSUPPORTED, f"attn_mask dtype {attn_mask.dtype} (need bool or floating)"
        if attn_mask.requires_grad:
            return R.ATTRIBUTE_UNSUPPORTED, "attn_mask requires grad (no mask gradient is computed)"
        try:
            torch.broadcast_shapes(attn_mask.shape, (B, Hq, Sq, key.shape[2]))
        except RuntimeError:
            return (
                R.SHAPE_UNSUPPORTED,
                f"attn_mask {tuple(attn_mask.shape)} does not broadcast to {(B, Hq, Sq, key.shape[2])}",
            )
        if attn_mask.dim() > 4:
            return R.SHAPE_UNSUPPORTED, "attn_mask has more than 4 dimensions"
    if not 0.0 <= dropout_p < 1.0:
        return R.ATTRIBUTE_UNSUPPORTED, f"dropout_p must be in [0, 1), got {dropout_p}"
    if query.device.type == "cpu":
        return None
    # requires_grad too: the backward kernels take fewer head dims than the forward ones.
    grad = query.requires_grad or key.requires_grad or value.requires_grad
    case = (
        "attention",
        *(_bridge.tensor_case(t) for t in (query, key, value, attn_mask)),
        float(dropout_p),
        grad,
    )
    return _bridge.cached_verdict(
        case, "attention", "flash_v2", lambda: _context(query, key, value, attn_mask, dropout_p)
    )


def _context(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None, dropout_p: float) -> object:
    """The OpContext of this attention call, as routing builds it (the bridge hands the
    kernels a floating mask as float32, so the case states it that way)."""
    from .. import _calls

    if attn_mask is not None and attn_mask.dtype.is_floating_point:
        attn_mask = attn_mask.to(torch.float32)
    enable_gqa = query.shape[1] != key.shape[1]
    call = _calls.parse_call(
        F.scaled_dot_product_attention,
        (query, key, value),
        {"attn_mask": attn_mask, "dropout_p": dropout_p, "enable_gqa": enable_gqa},
    )
    return _calls.context(call)


# ---- CPU reference ----------------------------------------------------------------
def _work_dtype(t: Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _lse_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _keep_mask(shape4: tuple[int, int, int, int], p: float, rng_state: Tensor | None, device) -> Tensor:
    if rng_state is None:
        raise ValueError("xpuruntime::flash_attn: dropout_p > 0 needs rng_state [seed, offset]")
    seed, offset = (int(x) for x in rng_state.detach().cpu().tolist())
    keep = dropout_keep_mask(*shape4, p, seed, offset)
    return torch.from_numpy(np.ascontiguousarray(keep)).to(device)


def _ref_probs(q, k, v, mask, causal, scale, lse=None):
    """Scores and probabilities in the working dtype; key/value expanded to q's heads."""
    wd = _work_dtype(q)
    G = q.shape[1] // k.shape[1]
    kk = k.to(wd).repeat_interleave(G, dim=1)
    vv = v.to(wd).repeat_interleave(G, dim=1)
    s = (q.to(wd) @ kk.transpose(-1, -2)) * scale
    Sq, Sk = s.shape[-2:]
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.to(wd)
    if causal:
        tri = torch.ones(Sq, Sk, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~tri, float("-inf"))
    if lse is None:
        lse = torch.logsumexp(s, dim=-1)
        lse = torch.where(torch.isneginf(lse), torch.full_like(lse, float("inf")), lse)
    probs = torch.exp(s - lse.to(wd).unsqueeze(-1))
    return probs, lse, kk, vv


def _flash_fwd_cpu(q, k, v, attn_mask, dropout_p, is_causal, scale, rng_state):
    probs, lse, _, vv = _ref_probs(q, k, v, attn_mask, is_causal, scale)
    if dropout_p > 0.0:
        keep = _keep_mask(tuple(probs.shape), dropout_p, rng_state, q.device)
        probs = probs * keep.to(probs.dtype) / (1.0 - dropout_p)
    out = (probs @ vv).to(q.dtype).contiguous()
    return out, lse.to(_lse_dtype(q.dtype)).contiguous()


def _flash_bwd_cpu(dout, q, k, v, out, lse, attn_mask, dropout_p, is_causal, scale, rng_state):
    wd = _work_dtype(q)
    probs, _, kk, vv = _ref_probs(q, k, v, attn_mask, is_causal, scale, lse=lse)
    do = dout.to(wd)
    if dropout_p > 0.0:
        keep = _keep_mask(tuple(probs.shape), dropout_p, rng_state, q.device).to(wd) / (1.0 - dropout_p)
    else:
        keep = None
    pd = probs * keep if keep is not None else probs
    dv = pd.transpose(-1, -2) @ do
    dp = do @ vv.transpose(-1, -2)
    if keep is not None:
        dp = dp * keep
    dsum = (do * out.to(wd)).sum(-1, keepdim=True)
    ds = probs * (dp - dsum)
    dq = (ds @ kk) * scale
    dk = (ds.transpose(-1, -2) @ q.to(wd)) * scale
    G = q.shape[1] // k.shape[1]
    if G > 1:
        B, Hkv, Sk, D = k.shape
        dk = dk.view(B, Hkv, G, Sk, D).sum(2)
        dv = dv.view(B, Hkv, G, Sk, D).sum(2)
    # contiguous like the CUDA kernels' outputs (and the fake implementation)
    return dq.to(q.dtype).contiguous(), dk.to(k.dtype).contiguous(), dv.to(v.dtype).contiguous()


# ---- the custom ops ---------------------------------------------------------------------
@_bridge.custom_op("xpuruntime::flash_attn_fwd", contiguous_inputs=False, mutates_args=(), device_types="cpu")
def flash_attn_fwd(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float,
    rng_state: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """FlashAttention forward: (out, lse). CPU: the float reference implementation."""
    return _flash_fwd_cpu(q, k, v, attn_mask, dropout_p, is_causal, scale, rng_state)


@_bridge.cuda_kernel(flash_attn_fwd)
def _(q, k, v, attn_mask, dropout_p, is_causal, scale, rng_state):
    return _bridge.flash_forward(q, k, v, attn_mask, dropout_p, is_causal, scale, rng_state)


@flash_attn_fwd.register_fake
def _(q, k, v, attn_mask, dropout_p, is_causal, scale, rng_state):
    B, Hq, Sq, D = q.shape
    out = q.new_empty((B, Hq, Sq, D))
    lse = q.new_empty((B, Hq, Sq), dtype=_lse_dtype(q.dtype))
    return out, lse


@_bridge.custom_op("xpuruntime::flash_attn_bwd", contiguous_inputs=False, mutates_args=(), device_types="cpu")
def flash_attn_bwd(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    attn_mask: Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float,
    rng_state: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """FlashAttention backward: (dq, dk, dv). CPU: the analytic reference formulas."""
    return _flash_bwd_cpu(dout, q, k, v, out, lse, attn_mask, dropout_p, is_causal, scale, rng_state)


@_bridge.cuda_kernel(flash_attn_bwd)
def _(dout, q, k, v, out, lse, attn_mask, dropout_p, is_causal, scale, rng_state):
    return _bridge.flash_backward(dout, q, k, v, out, lse, attn_mask, dropout_p, is_causal, scale, rng_state)


@flash_attn_bwd.register_fake
def _(dout, q, k, v, out, lse, attn_mask, dropout_p, is_causal, scale, rng_state):
    # the kernels and the reference return contiguous gradients
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, attn_mask, dropout_p, is_causal, scale, rng_state = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, attn_mask, rng_state)
    ctx.dropout_p, ctx.is_causal, ctx.scale = dropout_p, is_causal, scale


def _backward(ctx, grad_out, grad_lse):
    # lse is an auxiliary output for the backward pass: its gradient is not propagated.
    q, k, v, out, lse, attn_mask, rng_state = ctx.saved_tensors
    # A fixed (contiguous) layout for the incoming gradient: torch.compile may
    # otherwise choose a layout at run time other than the one it traced.
    dq, dk, dv = flash_attn_bwd(
        grad_out.contiguous(),
        q,
        k,
        v,
        out,
        lse,
        attn_mask,
        ctx.dropout_p,
        ctx.is_causal,
        ctx.scale,
        rng_state,
    )
    return dq, dk, dv, None, None, None, None, None


flash_attn_fwd.register_autograd(_backward, setup_context=_setup_context)


# ---- eager fast path (see _bridge.eager_direct_ok) ------------------------------------------
class _DirectAttention(torch.autograd.Function):
    """The CUDA kernels called directly, with the custom ops' gradient formula."""

    @staticmethod
    def forward(ctx, q, k, v, attn_mask, dropout_p, is_causal, scale, rng_state):  # type: ignore[override]
        out, lse = _bridge.flash_forward(q, k, v, attn_mask, dropout_p, is_causal, scale, rng_state, True)
        ctx.save_for_backward(q, k, v, out, lse, attn_mask, rng_state)
        ctx.dropout_p, ctx.is_causal, ctx.scale = dropout_p, is_causal, scale
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):  # type: ignore[override]
        q, k, v, out, lse, attn_mask, rng_state = ctx.saved_tensors
        if torch.is_grad_enabled() or not _bridge.eager_direct_ok(grad_out, q, k, v):
            return _backward(ctx, grad_out, grad_lse)  # create_graph, or a mode that must see the op
        dq, dk, dv = _bridge.flash_backward(
            grad_out, q, k, v, out, lse, attn_mask, ctx.dropout_p, ctx.is_causal, ctx.scale, rng_state, True
        )
        return dq, dk, dv, None, None, None, None, None


def attention_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float,
    rng_state: Tensor | None,
) -> Tensor:
    """The output of ``flash_attn_fwd`` for a supported case, on the cheapest equivalent path.

    In plain eager mode on CUDA the kernels are called directly (the custom op's
    dispatch costs more host time than a short attention kernel runs); torch.compile,
    dispatch modes and tensor subclasses get the custom op.
    """
    if q.device.type == "cuda" and _bridge.eager_direct_ok(q, k, v, attn_mask, rng_state):
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            return _DirectAttention.apply(q, k, v, attn_mask, dropout_p, is_causal, scale, rng_state)[0]
        return _bridge.flash_forward(q, k, v, attn_mask, dropout_p, is_causal, scale, rng_state, True)[0]
    return flash_attn_fwd(q, k, v, attn_mask, dropout_p, is_causal, scale, rng_state)[0]


# ---- public API -------------------------------------------------------------------------
def draw_rng_state(device: torch.device) -> Tensor:
    """A fresh ``[seed, offset]`` int64 tensor on ``device`` from torch's generator.

    Drawing on the device keeps CUDA graph replays fresh: torch's CUDA generator
    advances its offset on every replay of a captured ``randint``.
    """
    return torch.randint(0, 2**62, (2,), device=device, dtype=torch.int64)


def fused_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """Fused multi-head attention with our FlashAttention-2 kernels.

    Args:
        query: ``[batch, heads, seq_q, head_dim]`` (a 3-D ``[heads, seq, dim]`` is accepted).
        key: ``[batch, kv_heads, seq_k, head_dim]``; ``heads % kv_heads == 0`` (GQA).
        value: like ``key``.
        attn_mask: bool (True = attend) or additive float, broadcastable to
            ``[batch, heads, seq_q, seq_k]``.
        dropout_p: dropout probability on the attention weights (reproducible:
            the mask follows ``torch.manual_seed``).
        is_causal: top-left causal mask (key j visible to query i iff j <= i).
        scale: softmax scale, default ``1 / sqrt(head_dim)``.

    Returns:
        ``[batch, heads, seq_q, head_dim]`` in the query's dtype.

    A case the kernels do not support (another head dimension, float32 on CUDA,
    ...) runs torch's ``scaled_dot_product_attention`` instead and the reason is
    recorded in the decision log (``xpuruntime.pytorch.decision_log()``).
    """
    squeeze = query.dim() == 3
    if squeeze:
        query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
    if is_causal and attn_mask is not None:
        raise ValueError("fused_attention: pass either attn_mask or is_causal=True, not both (as torch SDPA)")
    why = flash_attention_support(query, key, value, attn_mask, dropout_p)
    if why is not None:
        record_direct_fallback("attention", "flash_v2", why, (query, key, value))
        out = torch.nn.functional.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=attn_mask,
            dropout_p=dropout_p,
            is_causal=is_causal,
            scale=scale,
            enable_gqa=query.shape[1] != key.shape[1],
        )
    else:
        sc = float(scale) if scale is not None else 1.0 / math.sqrt(query.shape[-1])
        rng = draw_rng_state(query.device) if dropout_p > 0.0 else None
        out = attention_forward(query, key, value, attn_mask, float(dropout_p), bool(is_causal), sc, rng)
    return out.squeeze(0) if squeeze else out
