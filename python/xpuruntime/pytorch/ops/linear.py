"""``xpuruntime::linear``: ``F.linear`` on the registry's GEMM kernels, the weight as it is.

A routed ``F.linear(x, weight, bias)`` is ``x @ weight.t() (+ bias)``; passing
``weight.t()`` to ``xpuruntime::matmul`` cost a view per call and a transpose node in
eager autograd, and under torch.compile the ``needs_contiguous_strides`` tag made
inductor copy every transposed operand: ``weight.t()`` in the forward, the output
gradient's transpose for the weight's gradient in the backward. Here the weight is an
operand as it is (the GEMM reads it transposed by its strides) and the backward is one
op, ``xpuruntime::linear_backward`` (dx = g @ W, dW = g^T x in the weight's layout, the
bias gradient's column sums), whose operands are the contiguous tensors autograd has.

On CUDA both run from a case's prepared calls (:class:`.matmul.CaseSlots`): in eager
mode the routed case's own (:func:`linear_forward`'s ``slots``); in a compiled graph a
per-process cache keyed by the operands' layouts. The CPU implementations are the float
references (so CI tests the dispatch, autograd and compile paths).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _bridge
from .matmul import (
    CaseSlots,
    _column_sums_direct,
    _current_device,
    _grads,
    _run_cuda,
)

__all__ = ["linear_forward", "xrt_linear", "xrt_linear_backward"]

#: layouts of a compiled graph's linear -> its CaseSlots (bounded: dynamic shapes)
_graph_cases: dict[tuple, CaseSlots] = {}
MAX_GRAPH_CASES = 4096


def _graph_slots(key: tuple) -> CaseSlots:
    slots = _graph_cases.get(key)
    if slots is None:
        if len(_graph_cases) >= MAX_GRAPH_CASES:
            _graph_cases.clear()
        slots = _graph_cases[key] = CaseSlots()
    return slots


def _forward_cuda(x: Tensor, weight: Tensor, bias: Tensor | None, kernel: str, slots: CaseSlots) -> Tensor:
    """``x @ weight.t() (+ bias)`` of CUDA tensors from the case's slots (filled on its first call)."""
    hit = slots.fwd[0]
    if hit is not None and hit[0].index == _current_device():
        return hit[0].run(x, weight, bias, hit[1])  # weight.t() is a view of weight's pointer
    return _run_cuda(x, weight.t(), bias, kernel, slots.fwd)


def _backward_cuda(
    grad: Tensor,
    x: Tensor,
    weight: Tensor,
    kernel: str,
    need: tuple[bool, bool, bool],
    has_bias: bool,
    slots: CaseSlots,
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """(dx, dweight, dbias) of CUDA tensors (None where not ``need``-ed).

    A case whose first backward found its operands used as they come (input and weight
    contiguous, each needed GEMM prepared: :attr:`CaseSlots.linear_bwd`) runs its later
    backwards from the slots on the pointers alone: no view op, no layout check."""
    if slots.linear_bwd is not None and slots.linear_bwd == _current_device():
        g = grad if grad.is_contiguous() else grad.contiguous()
        dx = dw = dbias = None
        if need[0]:
            h = slots.da[0]
            dx = h[0].run(g, weight, None, h[1])
        if need[1]:
            h = slots.db[0]
            dw = h[0].run(g, x, None, h[1])  # g^T x: the weight's gradient in its layout
        if has_bias and need[2]:
            h = slots.dbias[0]
            n = weight.shape[0]
            dbias = _bridge.run_column_sums(h[0], g, n, h[1]) if h is not None else g.view(-1, n).sum(0)
        return dx, dw, dbias
    ctx = SimpleNamespace(needs_input_grad=need, has_bias=has_bias, kernel=kernel)
    da, db, dbias, _ = _grads(ctx, x, weight.t(), grad, _run_cuda, _column_sums_direct, slots)
    # The slots are the case's (its layouts are fixed): if the operands were used as they
    # come, its later backwards run from the slots alone.
    index = _current_device()
    if (
        x.is_contiguous()
        and weight.is_contiguous()
        and weight.shape[1] > 1
        and _on(slots.da, need[0], index)
        and _on(slots.db, need[1], index)
        and (slots.dbias[0] is None or slots.dbias[0][1] == index)
    ):
        slots.linear_bwd = index
    return da, None if db is None else db.t(), dbias


def _on(slot: list, needed: bool, index: int) -> bool:
    """True when a needed gradient GEMM's slot holds a prepared GEMM of device ``index``."""
    return not needed or (slot[0] is not None and slot[0][0].index == index)


# ---- the custom ops (torch.compile, dispatch modes, subclasses; CPU references) ----------------
@_bridge.custom_op("xpuruntime::linear", contiguous_inputs=False, mutates_args=(), device_types="cpu")
def xrt_linear(x: Tensor, weight: Tensor, bias: Tensor | None, kernel: str) -> Tensor:
    """``F.linear(x, weight, bias)`` on ``kernel``. CPU: the float reference."""
    return F.linear(x, weight, bias)


def _layout_key(kernel: str, x: Tensor, weight: Tensor, extra: object) -> tuple:
    return (kernel, x.dtype, x.device, x.shape, x.stride(), weight.shape, weight.stride(), extra)


@_bridge.cuda_kernel(xrt_linear)
def _(x, weight, bias, kernel):
    bias_key = None if bias is None else (bias.dtype, bias.stride())
    slots = _graph_slots(("fwd", *_layout_key(kernel, x, weight, bias_key)))
    return _forward_cuda(x, weight, bias, kernel, slots)


@xrt_linear.register_fake
def _(x, weight, bias, kernel):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


@_bridge.custom_op(
    "xpuruntime::linear_backward", contiguous_inputs=False, mutates_args=(), device_types="cpu"
)
def xrt_linear_backward(
    grad: Tensor, x: Tensor, weight: Tensor, kernel: str, need_x: bool, need_weight: bool, need_bias: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, dweight, dbias) of ``F.linear``; a gradient not asked for is an empty tensor.
    CPU: the float reference."""
    n, k = weight.shape
    g2, x2 = grad.reshape(-1, n), x.reshape(-1, k)
    empty = grad.new_empty(0)
    return (
        torch.matmul(grad, weight) if need_x else empty,
        g2.t() @ x2 if need_weight else empty.clone(),
        g2.sum(0) if need_bias else empty.clone(),
    )


@_bridge.cuda_kernel(xrt_linear_backward)
def _(grad, x, weight, kernel, need_x, need_weight, need_bias):
    need = (need_x, need_weight, need_bias)
    slots = _graph_slots(("bwd", *_layout_key(kernel, x, weight, need)))
    dx, dw, db = _backward_cuda(grad, x, weight, kernel, need, need_bias, slots)
    empty = grad.new_empty(0)
    return (
        dx if dx is not None else empty,
        dw.contiguous() if dw is not None else empty.clone(),  # the fake's layout
        db if db is not None else empty.clone(),
    )


@xrt_linear_backward.register_fake
def _(grad, x, weight, kernel, need_x, need_weight, need_bias):
    n, k = weight.shape
    return (
        x.new_empty(x.shape) if need_x else grad.new_empty(0),
        weight.new_empty((n, k)) if need_weight else grad.new_empty(0),
        weight.new_empty(n) if need_bias else grad.new_empty(0),
    )


def _setup_context(ctx, inputs, output) -> None:
    x, weight, bias, kernel = inputs
    ctx.save_for_backward(x, weight)
    ctx.kernel, ctx.has_bias = kernel, bias is not None


def _backward(ctx, grad):
    x, weight = ctx.saved_tensors
    need_x, need_w, need_b = (
        ctx.needs_input_grad[0],
        ctx.needs_input_grad[1],
        ctx.has_bias and ctx.needs_input_grad[2],
    )
    dx, dw, db = xrt_linear_backward(grad, x, weight, ctx.kernel, need_x, need_w, need_b)
    return (dx if need_x else None, dw if need_w else None, db if need_b else None, None)


xrt_linear.register_autograd(_backward, setup_context=_setup_context)


# ---- eager fast path (see _bridge.eager_direct_ok) ------------------------------------------
class _DirectLinear(torch.autograd.Function):
    """``F.linear`` on the CUDA kernels directly for a routed case (``slots``), with the
    custom op's gradient formula: the weight as it is (no ``weight.t()`` view per call, no
    transpose node in autograd; its gradient comes back in its layout), the forward GEMM
    and, after a first backward, the whole backward from the case's slots on pointers."""

    @staticmethod
    def forward(ctx, x, weight, bias, kernel, slots):  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        ctx.kernel, ctx.has_bias, ctx.slots = kernel, bias is not None, slots
        return _forward_cuda(x, weight, bias, kernel, slots)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        if torch.is_grad_enabled() or not _bridge.eager_direct_ok(grad, x, weight):
            return (*_backward(ctx, grad), None)  # create_graph, or a mode that must see the op
        need = ctx.needs_input_grad
        dx, dw, db = _backward_cuda(grad, x, weight, ctx.kernel, need[:3], ctx.has_bias, ctx.slots)
        return dx, dw, db, None, None


def linear_forward(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    kernel: str,
    slots: CaseSlots | None = None,
    cuda: bool | None = None,
) -> Tensor:
    """``F.linear(x, weight, bias)`` on ``kernel`` for a supported case, on the cheapest
    equivalent path. ``slots``: a routed case's (only a caller whose tensors routing
    checked against one case passes them); ``cuda``: whether ``x`` is a CUDA tensor
    (None: asked)."""
    if cuda is None:
        cuda = x.device.type == "cuda"
    if cuda and _bridge.eager_direct_ok(x, weight, bias):
        if slots is None:  # a call of no routed case (a miss, a timing): slots of its own
            slots = CaseSlots()
        if torch.is_grad_enabled() and (
            x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
        ):
            return _DirectLinear.apply(x, weight, bias, kernel, slots)
        return _forward_cuda(x, weight, bias, kernel, slots)
    return xrt_linear(x, weight, bias, kernel)
