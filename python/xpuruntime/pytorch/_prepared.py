"""The hot path of a routed torch call: one case key, one prepared launcher (issue 17 §1).

A routed call's case is keyed by everything its decision and its launch depend on:
the torch function, every argument (a tensor by dtype, shape, device, requires_grad
and layout: ``True`` when contiguous, its strides otherwise; a number, string or
``None`` by value; a tuple or list element-wise), the torch autocast state and the
precision hint. The policy is not in the key: routing forgets its cases whenever the
policy changes or is cleared (:func:`.policy.set_kernel_policy`), so the cache
never answers for another policy.

On a miss, routing asks the Dispatcher (support checks, the decision, its record)
and :func:`prepare` builds the case's launcher: which of the call's arguments are
the kernel's operands (positions fixed by the key), the constants (scale, eps,
normalized_shape, dropout) parsed once, the autocast casts. A hit then costs the
key, a dictionary lookup, a counter increment and the launch; no ``Call`` object,
no OpContext, no Python support check.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

import torch
import torch.nn.functional as F

from . import _kernels, _routing
from .ops.attention import attention_forward, draw_rng_state
from .ops.layernorm import layer_norm_forward
from .ops.matmul import matmul_forward

__all__ = ["case_key", "prepare", "prepare_torch"]

Launch = Callable[[tuple, dict], Any]

_Tensor = torch.Tensor
_SCALARS = (int, float, bool, str)
_SCALAR_TYPES = frozenset((int, float, bool, str, type(None)))
# nn.Parameter disables __torch_function__: it behaves as a plain tensor.
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_PLAIN_OR_NONE = (torch.Tensor, torch.nn.Parameter, type(None))
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", None)


class _Uncacheable(Exception):
    """An argument with no cheap, exact key (the call takes the general path)."""


def _arg_key(a: Any) -> Any:
    if isinstance(a, _Tensor):
        return (a.dtype, a.shape, a.device, a.requires_grad, a.is_contiguous() or a.stride())
    if a is None or isinstance(a, _SCALARS):
        return a
    if isinstance(a, (tuple, list)):  # torch.Size and normalized_shape lists included
        return tuple([_arg_key(x) for x in a])
    raise _Uncacheable


def case_key(func: Callable, args: tuple, kwargs: dict, hint: str) -> tuple | None:
    """The routed call's case key, or None when an argument has no exact cheap key.

    Written for host time (it runs on every routed call): one pass over the
    positional and keyword values, tensors and scalars inline.
    """
    values = args + tuple(kwargs.values()) if kwargs else args
    try:
        key = [
            (a.dtype, a.shape, a.device, a.requires_grad, a.is_contiguous() or a.stride())
            if isinstance(a, _Tensor)
            else (a if type(a) in _SCALAR_TYPES else _arg_key(a))
            for a in values
        ]
    except _Uncacheable:
        return None
    key.append(func)
    key.append(tuple(kwargs) if kwargs else None)  # which values were keywords
    key.append(hint)
    if _any_autocast is None or _any_autocast():
        # The autocast dtype of the call's device decides what the kernels get.
        first = next((a for a in args if isinstance(a, _Tensor)), None)
        if first is None:
            return None
        dev = first.device.type
        enabled = dev in ("cuda", "cpu") and torch.is_autocast_enabled(dev)
        key.append((enabled, torch.get_autocast_dtype(dev) if enabled else None))
    return tuple(key)


def _getter(
    signature: tuple[str, ...], wanted: tuple[str, ...], defaults: dict[str, Any], args: tuple, kwargs: dict
) -> Launch:
    """``get(args, kwargs)`` -> the values of ``wanted`` for calls shaped like this one.

    ``signature``: the function's parameter names in order. The key fixes which
    parameters come positionally, which as keywords (in which order) and which take
    their defaults, so one tuple and an ``itemgetter`` bind them.
    """
    n_args, kw = len(args), list(kwargs)
    idx, consts = [], []
    for n in wanted:
        pos = signature.index(n)
        if pos < n_args:
            idx.append(pos)
        elif n in kwargs:
            idx.append(n_args + kw.index(n))
        else:
            idx.append(n_args + len(kw) + len(consts))
            consts.append(defaults[n])
    pick, tail = itemgetter(*idx), tuple(consts)
    if not kw:
        return lambda a, k: pick(a + tail)
    return lambda a, k: pick(a + tuple(k.values()) + tail)


def _cast(t: Any, dtype: torch.dtype) -> Any:
    return t.to(dtype) if isinstance(t, _Tensor) and t.is_floating_point() and t.dtype != dtype else t


def _matmul_launch(kernel: str, func: Callable, args: tuple, kwargs: dict, low: torch.dtype | None) -> Launch:
    kind = _routing._FUNCS[func]
    if kind == "linear":
        sig = ("input", "weight", "bias")
        get3 = _getter(sig, sig, {"bias": None}, args, kwargs)

        def operands(a: tuple, k: dict) -> tuple:
            x, w, b = get3(a, k)
            return x, w.t(), b

    elif kind == "addmm":
        sig = ("input", "mat1", "mat2")
        get3 = _getter(sig, sig, {}, args, kwargs)

        def operands(a: tuple, k: dict) -> tuple:
            bias, m1, m2 = get3(a, k)
            return m1, m2, bias

    elif kind == "rmatmul":  # only the plain form (two positional operands) runs our kernels

        def operands(a: tuple, k: dict) -> tuple:
            return a[1], a[0], None

    else:

        def operands(a: tuple, k: dict) -> tuple:
            return a[0], a[1], None

    if low is None:

        def launch(a: tuple, k: dict) -> Any:
            x, w, b = operands(a, k)
            return matmul_forward(x, w, b, kernel)

    else:

        def launch(a: tuple, k: dict) -> Any:
            x, w, b = operands(a, k)
            return matmul_forward(_cast(x, low), _cast(w, low), _cast(b, low), kernel)

    return launch


def _attention_launch(call: _routing.Call, args: tuple, kwargs: dict, low: torch.dtype | None) -> Launch:
    f = call.fields
    sig = _routing._SDPA_NAMES
    get4 = _getter(sig, sig[:4], _routing._SDPA_DEFAULTS, args, kwargs)
    p, causal = float(f["dropout_p"]), bool(f["is_causal"])
    scale = float(f["scale"]) if f["scale"] is not None else f["query"].shape[-1] ** -0.5

    def launch(a: tuple, k: dict) -> Any:
        q, kk, v, m = get4(a, k)
        if low is not None:
            q, kk, v = _cast(q, low), _cast(kk, low), _cast(v, low)
        rng = draw_rng_state(q.device) if p > 0.0 else None
        return attention_forward(q, kk, v, m, p, causal, scale, rng)

    return launch


def _layernorm_launch(call: _routing.Call, args: tuple, kwargs: dict, cast: bool) -> Launch:
    f = call.fields
    names = _routing._LN_NAMES
    get = _getter(names, (names[0], names[2], names[3]), _routing._LN_DEFAULTS, args, kwargs)
    ns = f["normalized_shape"]
    ns = [int(ns)] if isinstance(ns, int) else [int(s) for s in ns]
    eps = float(f["eps"])

    def launch(a: tuple, k: dict) -> Any:
        x, w, b = get(a, k)
        if cast:  # autocast runs layer_norm in float32; so do we
            x, w, b = _cast(x, torch.float32), _cast(w, torch.float32), _cast(b, torch.float32)
        return layer_norm_forward(x, ns, w, b, eps)

    return launch


def prepare_torch(func: Callable, args: tuple = (), kwargs: dict | None = None) -> Launch:
    """The launcher of torch's own kernel: the call itself, untouched.

    ``F.layer_norm`` is the one routed function with a Python wrapper: its body is
    ``torch.layer_norm(input, normalized_shape, weight, bias, eps, cudnn_enabled)``
    after a torch-function check, which a routed call has already passed, so plain
    tensors go straight to that body (a tensor subclass keeps the wrapper).
    """
    if func is F.layer_norm and kwargs is not None:
        names = _routing._LN_NAMES
        get = _getter(names, names, _routing._LN_DEFAULTS, args, kwargs)
        # what torch.backends.cudnn.enabled reads, without its Python descriptor
        cudnn_enabled = torch._C._get_cudnn_enabled

        def run_layer_norm(a: tuple, k: dict) -> Any:
            x, ns, w, b, eps = get(a, k)
            if type(x) in _PLAIN and type(w) in _PLAIN_OR_NONE and type(b) in _PLAIN_OR_NONE:
                return torch.layer_norm(x, ns, w, b, eps, cudnn_enabled())
            return func(*a, **k)

        return run_layer_norm

    def run_torch(a: tuple, k: dict) -> Any:
        return func(*a, **k)

    return run_torch


def prepare(
    kernel: str, call: _routing.Call, func: Callable, args: tuple, kwargs: dict, autocast: tuple
) -> Launch:
    """The launcher of ``kernel`` for calls of this case: ``launch(args, kwargs)``.

    It gives the bits :func:`._routing.run` gives for the same call (same kernel,
    same casts, same paths in the ops modules); only the parsing is done once.
    """
    if kernel == _kernels.FALLBACK:
        return prepare_torch(func, args, kwargs)
    if call.op == "attention" and kernel != "flash_v2":

        def run_backend(a: tuple, k: dict) -> Any:
            return _routing._run_sdpa_backend(kernel, func, a, k)

        return run_backend
    low = autocast[1] if autocast[0] else None
    if call.op == "matmul":
        return _matmul_launch(kernel, func, args, kwargs, low)
    if call.op == "attention":
        return _attention_launch(call, args, kwargs, low)
    if call.op == "layernorm":
        return _layernorm_launch(call, args, kwargs, autocast[0])
    raise AssertionError(call.op)
