"""Routed torch calls in a normalised form, and their OpContext (what the kernels see).

Shared by routing (:mod:`._routing`: the Dispatcher's question and the run) and the ops
modules' support checks (:mod:`.ops.attention`, :mod:`.ops.layernorm`: the registry's
KernelDef answers for the same OpContext). It imports no ops module, so both can use it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .. import _core

__all__ = ["FUNC_OPS", "Call", "context", "output_shape", "parse_call", "routed_functions"]


def output_shape(a: torch.Tensor, b: torch.Tensor) -> tuple[int, ...]:
    """The shape of ``a @ b`` (batch dimensions broadcast)."""
    # The common cases without torch.broadcast_shapes, which costs tens of
    # microseconds of host time (it runs through torch._refs) on every call.
    if b.dim() == 2 or a.shape[:-2] == b.shape[:-2]:
        return (*a.shape[:-1], b.shape[-1])
    if a.dim() == 2:
        return (*b.shape[:-2], a.shape[-2], b.shape[-1])
    batch = torch.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    return (*batch, a.shape[-2], b.shape[-1])


# ---- calls: the routed torch functions, normalised --------------------------------------
@dataclass
class Call:
    """One intercepted torch call in a normalised form."""

    op: str
    name: str  # the torch function's name, recorded as the decision's node
    tensors: tuple[torch.Tensor, ...]  # the inputs described in the decision
    fields: dict[str, Any]
    extra_key: tuple = ()


def _bind(
    args: Sequence[Any], kwargs: dict[str, Any], names: Sequence[str], defaults: dict[str, Any]
) -> dict:
    out = dict(defaults)
    for n, v in zip(names, args):
        out[n] = v
    out.update(kwargs)
    return out


_SDPA_NAMES = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_SDPA_DEFAULTS = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}
_LN_NAMES = ("input", "normalized_shape", "weight", "bias", "eps")
_LN_DEFAULTS = {"weight": None, "bias": None, "eps": 1e-5}


def _matmul_call(name: str, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, ok: bool) -> Call:
    tensors = (a, b) if bias is None else (a, b, bias)
    fields = {"a": a, "b": b, "bias": bias, "plain": ok}
    return Call("matmul", name, tensors, fields, (bias is not None, ok))


def parse_call(func: Callable, args: tuple, kwargs: dict) -> Call | None:
    """The normalised call for a routed torch function, or None when ``func`` is not routed."""
    kind = _FUNCS.get(func)
    if kind is None:
        return None
    try:
        if kind == "attention":
            f = _bind(args, kwargs, _SDPA_NAMES, _SDPA_DEFAULTS)
            q, k, v, m = f["query"], f["key"], f["value"], f["attn_mask"]
            tensors = (q, k, v) if m is None else (q, k, v, m)
            key = (
                m is not None and m.dtype,
                m is not None and m.requires_grad,
                float(f["dropout_p"]) > 0,
                bool(f["is_causal"]),
                bool(f["enable_gqa"]),
                any(t.requires_grad for t in (q, k, v)),
            )
            return Call("attention", "scaled_dot_product_attention", tensors, f, key)
        if kind == "layernorm":
            f = _bind(args, kwargs, _LN_NAMES, _LN_DEFAULTS)
            x, w, b = f["input"], f["weight"], f["bias"]
            tensors = tuple(t for t in (x, w, b) if t is not None)
            return Call(
                "layernorm",
                "layer_norm",
                tensors,
                f,
                (w is not None, b is not None, tuple(f["normalized_shape"])),
            )
        name = kind
        if kind == "linear":
            f = _bind(args, kwargs, ("input", "weight", "bias"), {"bias": None})
            w = f["weight"]
            ok = isinstance(w, torch.Tensor) and w.dim() == 2
            return _matmul_call("linear", f["input"], w.t() if ok else w, f["bias"], ok)
        if kind == "addmm":
            f = _bind(args, kwargs, ("input", "mat1", "mat2"), {})
            plain = (
                kwargs.get("beta", 1) == 1
                and kwargs.get("alpha", 1) == 1
                and len(args) <= 3
                and "out" not in kwargs
                and f["input"].dim() == 1
            )
            return _matmul_call("addmm", f["mat1"], f["mat2"], f["input"], plain)
        if kind == "rmatmul":
            return _matmul_call("matmul", args[1], args[0], None, len(args) == 2 and not kwargs)
        a, b = args[0], args[1] if len(args) > 1 else kwargs.get("other", kwargs.get("mat2"))
        return _matmul_call(name, a, b, None, len(args) == 2 and not kwargs)
    except (IndexError, KeyError, TypeError, AttributeError):
        return None  # an unusual call form: leave it to torch untouched


_FUNCS: dict[Callable, str] = {
    F.scaled_dot_product_attention: "attention",
    F.layer_norm: "layernorm",
    F.linear: "linear",
    torch.matmul: "matmul",
    torch.Tensor.matmul: "matmul",
    torch.Tensor.__matmul__: "matmul",
    torch.Tensor.__rmatmul__: "rmatmul",
    torch.mm: "mm",
    torch.Tensor.mm: "mm",
    torch.bmm: "bmm",
    torch.Tensor.bmm: "bmm",
    torch.addmm: "addmm",
    torch.Tensor.addmm: "addmm",
}


#: torch function -> the op key it is routed under.
FUNC_OPS: dict[Callable, str] = {
    f: ("attention" if k == "attention" else "layernorm" if k == "layernorm" else "matmul")
    for f, k in _FUNCS.items()
}


def routed_functions() -> tuple[Callable, ...]:
    """The torch functions a kernel policy routes."""
    return tuple(_FUNCS)


_capabilities: dict[int, int] = {}


def _capability(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    index = device.index if device.index is not None else torch.cuda.current_device()
    cap = _capabilities.get(index)
    if cap is None:
        major, minor = torch.cuda.get_device_capability(index)
        cap = _capabilities[index] = major * 10 + minor
    return cap


def _spec(t: torch.Tensor) -> tuple[str, list[int], list[int]]:
    return (str(t.dtype).replace("torch.", ""), list(t.shape), list(t.stride()))


def context(call: Call) -> Any:
    """The call's OpContext in the kernels' own terms: inputs, the output, and only the
    attributes the kernels read (a C++ kernel refuses attributes it does not know).

    matmul: a, b[, bias] -> out, no attributes (routed forms are plain products).
    attention: q, k, v[, attn_mask][, rng_state int64[2] when dropout_p > 0] -> out;
    is_causal, dropout_p[, scale][, with_backward when q, k or v requires grad] (a
    0-element mask stands for none).
    layernorm: x[, weight][, bias] -> y; axis, epsilon (a 0-element weight stands for
    "no weight" when only a bias is given, as ONNX LayerNormalization's kernels take it).
    """
    f = call.fields
    attrs: dict[str, Any] = {}
    inputs = [_spec(t) for t in call.tensors]
    outputs: list[tuple[str, list[int]]] = []
    if call.op == "matmul":
        a, b = f["a"], f["b"]
        if isinstance(b, torch.Tensor) and a.dim() >= 2 and b.dim() >= 2:
            try:
                outputs.append((_spec(a)[0], list(output_shape(a, b))))
            except RuntimeError:  # batch dimensions that do not broadcast: the kernels say why
                pass
    elif call.op == "attention":
        q, v = f["query"], f["value"]
        attrs.update(is_causal=bool(f["is_causal"]), dropout_p=float(f["dropout_p"]))
        if any(t.requires_grad for t in (q, f["key"], v)):
            attrs["with_backward"] = True  # the backward kernels take fewer head dims
        if f["scale"] is not None:
            attrs["scale"] = float(f["scale"])
        if attrs["dropout_p"] > 0.0:  # the bridge draws [seed, offset] when it runs
            if f["attn_mask"] is None:
                inputs.append(("bool", [0]))
            inputs.append(("int64", [2]))
        outputs.append((_spec(q)[0], [*q.shape[:-1], v.shape[-1]]))
    else:
        x, w, b = f["input"], f["weight"], f["bias"]
        ns = f["normalized_shape"]
        attrs.update(axis=-(1 if isinstance(ns, int) else len(ns)), epsilon=float(f["eps"]))
        inputs = [_spec(x)]
        if w is not None:
            inputs.append(_spec(w))
        elif b is not None:
            inputs.append((_spec(x)[0], [0]))
        if b is not None:
            inputs.append(_spec(b))
        outputs.append((_spec(x)[0], list(x.shape)))
    device = call.tensors[0].device
    return _core.OpContext(
        call.op,
        inputs,
        outputs,
        device=str(device),
        capability=_capability(device),
        node=call.name,
        attrs=attrs,
    )
