"""``fused_layernorm`` (seed 002 §5.3): our fused LayerNorm as torch custom ops.

* ``xpuruntime::layer_norm_fwd(x, normalized_shape, weight, bias, eps) -> (y, mean, rstd)``
* ``xpuruntime::layer_norm_bwd(dy, x, normalized_shape, mean, rstd, weight, bias,
  need_weight_grad, need_bias_grad) -> (dx, dweight, dbias)``

CUDA: our kernels (one row per thread group in registers, fp32 statistics,
dweight/dbias by a two-stage reduction). CPU: a reference implementation in
float32 (float64 for float64 inputs). Fake implementations and an autograd
formula make the op work under ``torch.compile`` and autograd. ``mean`` and
``rstd`` are flat ``[rows]`` tensors in fp32 (fp64 for float64 input).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from ... import _core
from .._log import record_direct_fallback
from . import _bridge

__all__ = ["fused_layernorm", "layer_norm_forward", "layernorm_support"]

R = _core.reason  # reason codes, declared in C++ (kernel_registry.h)


def _stat_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def layernorm_support(
    x: Tensor, normalized_shape: Sequence[int], weight: Tensor | None = None, bias: Tensor | None = None
) -> tuple[str, str] | None:
    """Why the ``fused`` kernel cannot run this case: ``(reason_code, detail)``, or None.

    The call itself must make sense (normalized_shape the input's trailing shape,
    weight and bias of that shape, dtype and device); then CPU tensors run the
    reference implementation, and on another device the registry's ``fused``
    KernelDef says whether our kernel runs the case: the C++ definition the
    Dispatcher checks, not a Python copy of it.
    """
    shape = tuple([int(s) for s in normalized_shape])
    n = len(shape)
    if n == 0 or n > x.dim() or x.shape[-n:] != shape:
        return (
            R.SHAPE_UNSUPPORTED,
            f"normalized_shape {shape} is not the trailing shape of input {tuple(x.shape)}",
        )
    if math.prod(shape) == 0:
        return R.SHAPE_UNSUPPORTED, "normalized_shape has no elements"
    dtype, device = x.dtype, x.device
    if not dtype.is_floating_point:
        return R.DTYPE_UNSUPPORTED, f"{dtype} is not a floating dtype"
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        if t.shape != shape:
            return R.SHAPE_UNSUPPORTED, f"{name} shape {tuple(t.shape)} != normalized_shape {shape}"
        if t.dtype != dtype:
            return R.DTYPE_UNSUPPORTED, f"{name} dtype {t.dtype} != input dtype {dtype}"
        if t.device != device:
            return R.DEVICE_MISMATCH, f"{name} is on {t.device}, input on {device}"
    if device.type == "cpu":
        return None
    from .. import _calls

    def context() -> object:
        return _calls.context(
            _calls.parse_call(torch.nn.functional.layer_norm, (x, list(shape), weight, bias), {})
        )

    case = ("layernorm", *(_bridge.tensor_case(t) for t in (x, weight, bias)), shape)
    return _bridge.cached_verdict(case, "layernorm", "fused", context)


# ---- CPU reference -------------------------------------------------------------------
def _ln_fwd_cpu(x, normalized_shape, weight, bias, eps):
    cols = math.prod(normalized_shape)
    wd = _stat_dtype(x.dtype)
    xf = x.reshape(-1, cols).to(wd)
    mean = xf.mean(dim=1)
    var = ((xf - mean[:, None]) ** 2).mean(dim=1)
    rstd = torch.rsqrt(var + eps)
    y = (xf - mean[:, None]) * rstd[:, None]
    if weight is not None:
        y = y * weight.reshape(-1).to(wd)
    if bias is not None:
        y = y + bias.reshape(-1).to(wd)
    return y.to(x.dtype).reshape(x.shape).contiguous(), mean, rstd


def _ln_bwd_cpu(dy, x, normalized_shape, mean, rstd, weight):
    cols = math.prod(normalized_shape)
    wd = _stat_dtype(x.dtype)
    xf = x.reshape(-1, cols).to(wd)
    dyf = dy.reshape(-1, cols).to(wd)
    xhat = (xf - mean.to(wd)[:, None]) * rstd.to(wd)[:, None]
    g = dyf * weight.reshape(-1).to(wd) if weight is not None else dyf
    c1 = (g * xhat).mean(dim=1, keepdim=True)
    c2 = g.mean(dim=1, keepdim=True)
    dx = (g - xhat * c1 - c2) * rstd.to(wd)[:, None]
    dw = (dyf * xhat).sum(0)
    db = dyf.sum(0)
    return dx.to(x.dtype).reshape(x.shape).contiguous(), dw, db


# ---- custom ops --------------------------------------------------------------------------
@_bridge.custom_op("xpuruntime::layer_norm_fwd", mutates_args=(), device_types="cpu")
def layer_norm_fwd(
    x: Tensor, normalized_shape: list[int], weight: Tensor | None, bias: Tensor | None, eps: float
) -> tuple[Tensor, Tensor, Tensor]:
    """Fused LayerNorm forward: (y, mean, rstd). CPU: the reference implementation."""
    return _ln_fwd_cpu(x, normalized_shape, weight, bias, eps)


@_bridge.cuda_kernel(layer_norm_fwd)
def _(x, normalized_shape, weight, bias, eps):
    y, mean, rstd = _bridge.layernorm_forward(x, weight, bias, math.prod(normalized_shape), eps)
    return y.reshape(x.shape), mean, rstd


@layer_norm_fwd.register_fake
def _(x, normalized_shape, weight, bias, eps):
    rows = x.numel() // max(1, math.prod(normalized_shape))
    st = _stat_dtype(x.dtype)
    return x.new_empty(x.shape), x.new_empty((rows,), dtype=st), x.new_empty((rows,), dtype=st)


@_bridge.custom_op("xpuruntime::layer_norm_bwd", mutates_args=(), device_types="cpu")
def layer_norm_bwd(
    dy: Tensor,
    x: Tensor,
    normalized_shape: list[int],
    mean: Tensor,
    rstd: Tensor,
    weight: Tensor | None,
    need_weight_grad: bool,
    need_bias_grad: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """Fused LayerNorm backward: (dx, dweight, dbias); a grad not asked for is an empty tensor."""
    dx, dw, db = _ln_bwd_cpu(dy, x, normalized_shape, mean, rstd, weight)
    shape = tuple(normalized_shape)
    dw = dw.to(x.dtype).reshape(shape) if need_weight_grad else x.new_empty((0,))
    db = db.to(x.dtype).reshape(shape) if need_bias_grad else x.new_empty((0,))
    return dx, dw, db


@_bridge.cuda_kernel(layer_norm_bwd)
def _(dy, x, normalized_shape, mean, rstd, weight, need_weight_grad, need_bias_grad):
    shape = tuple(normalized_shape)
    dx, dw, db = _bridge.layernorm_backward(
        dy, x, mean, rstd, weight, math.prod(shape), need_weight_grad, need_bias_grad
    )
    dw = dw.reshape(shape) if dw is not None else x.new_empty((0,))
    db = db.reshape(shape) if db is not None else x.new_empty((0,))
    return dx.reshape(x.shape), dw, db


@layer_norm_bwd.register_fake
def _(dy, x, normalized_shape, mean, rstd, weight, need_weight_grad, need_bias_grad):
    shape = tuple(normalized_shape)
    dw = x.new_empty(shape) if need_weight_grad else x.new_empty((0,))
    db = x.new_empty(shape) if need_bias_grad else x.new_empty((0,))
    return x.new_empty(x.shape), dw, db


def _setup_context(ctx, inputs, output) -> None:
    x, normalized_shape, weight, bias, _eps = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, mean, rstd, weight)
    ctx.normalized_shape = list(normalized_shape)
    ctx.has_weight = weight is not None
    ctx.has_bias = bias is not None


def _backward(ctx, grad_y, grad_mean, grad_rstd):
    # mean and rstd are saved statistics; their gradients are not propagated.
    x, mean, rstd, weight = ctx.saved_tensors
    need_w = ctx.has_weight and ctx.needs_input_grad[2]
    need_b = ctx.has_bias and ctx.needs_input_grad[3]
    dx, dw, db = layer_norm_bwd(
        grad_y.contiguous(), x, ctx.normalized_shape, mean, rstd, weight, need_w, need_b
    )
    return dx, None, dw if need_w else None, db if need_b else None, None


layer_norm_fwd.register_autograd(_backward, setup_context=_setup_context)


# ---- eager fast path (see _bridge.eager_direct_ok) ------------------------------------------
def _eager_direct_ok(x: Tensor, weight: Tensor | None, bias: Tensor | None) -> bool:
    return _bridge.eager_direct_ok(x, weight, bias)


class _DirectLayerNorm(torch.autograd.Function):
    """The CUDA kernels called directly, with the custom ops' gradient formula."""

    @staticmethod
    def forward(ctx, x, normalized_shape, weight, bias, eps):  # type: ignore[override]
        y, mean, rstd = _bridge.layernorm_forward(x, weight, bias, math.prod(normalized_shape), eps)
        ctx.save_for_backward(x, mean, rstd, weight)
        ctx.normalized_shape = list(normalized_shape)
        ctx.has_weight = weight is not None
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    def backward(ctx, grad_y):  # type: ignore[override]
        x, mean, rstd, weight = ctx.saved_tensors
        if torch.is_grad_enabled() or not _eager_direct_ok(grad_y, x, weight):
            # create_graph (the custom op says it has no double backward) or a mode
            # that must see the op.
            return _backward(ctx, grad_y, None, None)
        need_w = ctx.has_weight and ctx.needs_input_grad[2]
        need_b = ctx.has_bias and ctx.needs_input_grad[3]
        shape = ctx.normalized_shape
        dx, dw, db = _bridge.layernorm_backward(
            grad_y.contiguous(), x, mean, rstd, weight, math.prod(shape), need_w, need_b
        )
        # dx is x's shape already (empty_like); dw and db are [cols]: a view only for a
        # normalized_shape of more than one dimension
        one = len(shape) == 1
        return (
            dx,
            None,
            (dw if one else dw.reshape(shape)) if need_w else None,
            (db if one else db.reshape(shape)) if need_b else None,
            None,
        )


def layer_norm_forward(
    x: Tensor, normalized_shape: list[int], weight: Tensor | None, bias: Tensor | None, eps: float
) -> Tensor:
    """y of ``layer_norm_fwd`` for a supported case, on the cheapest path that is equivalent.

    Without autograd, mean and rstd are neither allocated nor written.
    """
    if x.device.type == "cuda" and _eager_direct_ok(x, weight, bias):
        grad = torch.is_grad_enabled() and (
            x.requires_grad
            or (weight is not None and weight.requires_grad)
            or (bias is not None and bias.requires_grad)
        )
        if not grad:
            cols = math.prod(normalized_shape)
            return _bridge.layernorm_forward(x, weight, bias, cols, eps, with_stats=False)[0]
        return _DirectLayerNorm.apply(x, normalized_shape, weight, bias, eps)
    y, _, _ = layer_norm_fwd(x, normalized_shape, weight, bias, eps)
    return y


def fused_layernorm(
    input: Tensor,
    normalized_shape: Sequence[int] | int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Fused Layer Normalization over the trailing ``normalized_shape`` dimensions.

    One kernel computes mean and variance (fp32 statistics for every dtype),
    normalises, scales and shifts; the backward pass fuses dx with the
    dweight/dbias reductions. float32, float16 and bfloat16 run on CUDA; other
    cases run ``torch.nn.functional.layer_norm`` and the reason is recorded in the
    decision log.
    """
    shape = (
        [int(normalized_shape)] if isinstance(normalized_shape, int) else [int(s) for s in normalized_shape]
    )
    why = layernorm_support(input, shape, weight, bias)
    if why is not None:
        record_direct_fallback("layernorm", "fused", why, (input,))
        return torch.nn.functional.layer_norm(input, shape, weight, bias, eps)
    return layer_norm_forward(input, shape, weight, bias, float(eps))
