"""How one torch call is routed under a KernelPolicy: candidates, verdicts, runners.

For each canonical op key (``matmul``, ``attention``, ``layernorm``) this module
knows the kernels, why each cannot run a case (a stable reason code and a
detail), how to run each one, and how to time them for ``best_performance``.
:mod:`.policy` owns the state (policy, decision log, per-case cache) and the
TorchFunctionMode that calls :func:`route`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..dispatch import Candidate, Decision
from .ops.attention import attention_forward, draw_rng_state, flash_attention_support
from .ops.layernorm import layer_norm_forward, layernorm_support
from .ops.matmul import matmul_forward, matmul_support

#: Kernels per op key, in the order ``auto`` tries them.
OP_KERNELS: dict[str, tuple[str, ...]] = {
    "matmul": ("cublasLt", "cublas", "torch"),
    "attention": ("flash_v2", "cudnn", "torch_flash", "efficient", "math"),
    "layernorm": ("fused", "torch"),
}
#: Policy op keys accepted as aliases of the canonical ones.
OP_ALIASES = {
    "mm": "matmul",
    "bmm": "matmul",
    "linear": "matmul",
    "addmm": "matmul",
    "gemm": "matmul",
    "sdpa": "attention",
    "scaled_dot_product_attention": "attention",
    "layer_norm": "layernorm",
}


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


# ---- support: why a kernel cannot run a call ----------------------------------------------
def _sdpa_backend(kernel: str):
    from torch.nn.attention import SDPBackend

    return {
        "torch_flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }[kernel]


def _torch_sdpa_support(kernel: str, f: dict) -> tuple[str, str] | None:
    q, k, v, m = f["query"], f["key"], f["value"], f["attn_mask"]
    if kernel == "math":
        return None
    if q.device.type != "cuda":
        return "device_mismatch", f"torch's {kernel} SDPA backend runs CUDA tensors only"
    checks = {
        "torch_flash": "can_use_flash_attention",
        "efficient": "can_use_efficient_attention",
        "cudnn": "can_use_cudnn_attention",
    }
    check = getattr(torch.backends.cuda, checks[kernel], None)
    params_cls = getattr(torch.backends.cuda, "SDPAParams", None)
    if check is None or params_cls is None:
        return "backend_unavailable", f"this torch has no {checks[kernel]}"
    try:
        params = params_cls(q, k, v, m, float(f["dropout_p"]), bool(f["is_causal"]), bool(f["enable_gqa"]))
    except TypeError:
        params = params_cls(q, k, v, m, float(f["dropout_p"]), bool(f["is_causal"]))
    if not check(params, False):
        return "shape_unsupported", f"torch reports {kernel} cannot run this case ({checks[kernel]} is False)"
    return None


def support(kernel: str, call: Call) -> tuple[str, str] | None:
    """Why ``kernel`` cannot run ``call`` (reason_code, detail), or None when it can."""
    f = call.fields
    if kernel == "torch":
        return None
    if call.op == "matmul":
        if not f["plain"]:
            return "attribute_unsupported", "this call form (beta/alpha/out=/vector operand) stays with torch"
        return matmul_support(kernel, f["a"], f["b"], f["bias"])
    if call.op == "attention":
        if kernel != "flash_v2":
            return _torch_sdpa_support(kernel, f)
        q, k = f["query"], f["key"]
        if q.dim() == 4 and k.dim() == 4 and q.shape[1] != k.shape[1] and not f["enable_gqa"]:
            return "shape_unsupported", "query and key head counts differ and enable_gqa=False"
        if f["is_causal"] and f["attn_mask"] is not None:
            return "attribute_unsupported", "attn_mask together with is_causal"
        return flash_attention_support(q, k, f["value"], f["attn_mask"], float(f["dropout_p"]))
    if call.op == "layernorm":
        ns = f["normalized_shape"]
        ns = [ns] if isinstance(ns, int) else list(ns)
        return layernorm_support(f["input"], ns, f["weight"], f["bias"])
    return "attribute_unsupported", f"unknown op {call.op}"


# ---- runners ----------------------------------------------------------------------------------
def autocast_state(call: Call) -> tuple:
    """(enabled, dtype) of torch autocast for the call's device (part of the routing key)."""
    dev = call.tensors[0].device.type
    if dev not in ("cuda", "cpu") or not torch.is_autocast_enabled(dev):
        return (False, None)
    return (True, torch.get_autocast_dtype(dev))


def autocast_view(call: Call) -> Call:
    """The call with its inputs cast as torch autocast would cast them.

    The mode sees a call before autocast does (autocast acts at the aten level),
    and our custom ops are on none of autocast's lists, so our kernels get the
    inputs torch's kernels would have got: matmul and attention in the autocast
    dtype, layer_norm in float32.
    """
    enabled, low = autocast_state(call)
    if not enabled:
        return call

    def cast(t, dtype):
        return t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t

    f = dict(call.fields)
    if call.op == "matmul":
        f["a"], f["b"], f["bias"] = cast(f["a"], low), cast(f["b"], low), cast(f["bias"], low)
        tensors = tuple(t for t in (f["a"], f["b"], f["bias"]) if t is not None)
    elif call.op == "attention":
        f["query"], f["key"], f["value"] = (cast(f[n], low) for n in ("query", "key", "value"))
        tensors = tuple(t for t in (f["query"], f["key"], f["value"], f["attn_mask"]) if t is not None)
    else:
        f["input"], f["weight"], f["bias"] = (cast(f[n], torch.float32) for n in ("input", "weight", "bias"))
        tensors = tuple(t for t in (f["input"], f["weight"], f["bias"]) if t is not None)
    return Call(call.op, call.name, tensors, f, call.extra_key)


_SDP_FLAGS = (  # (getter, setter, kernel) of torch's global SDPA backend switches
    ("_get_flash_sdp_enabled", "_set_sdp_use_flash", "torch_flash"),
    ("_get_mem_efficient_sdp_enabled", "_set_sdp_use_mem_efficient", "efficient"),
    ("_get_math_sdp_enabled", "_set_sdp_use_math", "math"),
    ("_get_cudnn_sdp_enabled", "_set_sdp_use_cudnn", "cudnn"),
)
_HAVE_SDP_FLAGS = all(hasattr(torch._C, g) and hasattr(torch._C, s) for g, s, _ in _SDP_FLAGS)


def _run_sdpa_backend(kernel: str, func: Callable, args: tuple, kwargs: dict) -> Any:
    """torch's SDPA restricted to one backend (what ``sdpa_kernel([backend])`` does).

    Outside torch.compile the backend switches are flipped directly: the context
    manager costs tens of microseconds per call, a visible share of a
    sub-millisecond attention kernel.
    """
    if not _HAVE_SDP_FLAGS or torch.compiler.is_compiling():
        from torch.nn.attention import sdpa_kernel

        with sdpa_kernel([_sdpa_backend(kernel)]):
            return func(*args, **kwargs)
    c = torch._C
    saved = [getattr(c, g)() for g, _, _ in _SDP_FLAGS]
    try:
        for _, setter, name in _SDP_FLAGS:
            getattr(c, setter)(name == kernel)
        return func(*args, **kwargs)
    finally:
        for (_, setter, _), v in zip(_SDP_FLAGS, saved):
            getattr(c, setter)(v)


def run(
    kernel: str, call: Call, func: Callable, args: tuple, kwargs: dict, autocast: tuple | None = None
) -> Any:
    """Runs ``call`` on ``kernel``; ``torch`` replays the original function untouched."""
    if kernel == "torch":
        return func(*args, **kwargs)
    if call.op == "attention" and kernel != "flash_v2":
        return _run_sdpa_backend(kernel, func, args, kwargs)
    if autocast is None or autocast[0]:
        call = autocast_view(call)
    f = call.fields
    if call.op == "matmul":
        return matmul_forward(f["a"], f["b"], f["bias"], kernel)
    if call.op == "attention":
        q, k, v = f["query"], f["key"], f["value"]
        scale = f["scale"] if f["scale"] is not None else q.shape[-1] ** -0.5
        p = float(f["dropout_p"])
        rng = draw_rng_state(q.device) if p > 0.0 else None
        return attention_forward(q, k, v, f["attn_mask"], p, bool(f["is_causal"]), float(scale), rng)
    if call.op == "layernorm":
        ns = f["normalized_shape"]
        ns = [int(ns)] if isinstance(ns, int) else [int(s) for s in ns]
        return layer_norm_forward(f["input"], ns, f["weight"], f["bias"], float(f["eps"]))
    raise AssertionError(call.op)


def time_kernel(kernel: str, call: Call, func: Callable, args: tuple, kwargs: dict, iters: int = 10) -> float:
    """Median milliseconds of ``kernel`` on this call (forward, plus backward when inputs need grad)."""
    grads = [t for t in call.tensors if t.requires_grad]
    if grads:
        detached = {id(t): t.detach().requires_grad_(True) for t in grads}

        def swap(x):
            return detached.get(id(x), x) if isinstance(x, torch.Tensor) else x

        targs = tuple(swap(a) for a in args)
        tkw = {k: swap(v) for k, v in kwargs.items()}
        tcall = parse_call(func, targs, tkw)
        leaves = list(detached.values())

        def step():
            out = run(kernel, tcall, func, targs, tkw)
            torch.autograd.grad(out, leaves, torch.ones_like(out))
    else:

        def step():
            with torch.no_grad():
                run(kernel, call, func, args, kwargs)

    for _ in range(3):
        step()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(statistics.median(times))


# ---- selection ------------------------------------------------------------------------------------
class PolicyViolation(Exception):
    """mode='require' and no required kernel can run the case (carries the message)."""


def _describe(call: Call) -> tuple[str, list[str], list[list[int]]]:
    t0 = call.tensors[0]
    return (
        str(t0.device),
        [str(t.dtype).replace("torch.", "") for t in call.tensors],
        [list(t.shape) for t in call.tensors],
    )


def select(
    call: Call,
    names: Sequence[str],
    mode: str,
    strategy: str,
    hint: str,
    func: Callable,
    args: tuple,
    kwargs: dict,
) -> Decision:
    """Chooses the kernel for ``call`` under a policy entry and returns the Decision.

    Raises PolicyViolation (mode 'require') when none of the named kernels can run.
    """
    call = autocast_view(call)
    known = OP_KERNELS[call.op]
    named = [n for n in names if n != "auto"]
    auto = not named or names[-1] == "auto"
    order = named + ([k for k in known if k not in named] if auto else [])
    cands: list[Candidate] = []
    for k in order:
        why = support(k, call)
        cands.append(Candidate(k, "supported") if why is None else Candidate(k, "rejected", why[0], why[1]))
    device, dtypes, shapes = _describe(call)
    detail = f"precision_hint={hint}" if hint else ""
    decision = Decision(
        op=call.op,
        device=device,
        dtypes=dtypes,
        shapes=shapes,
        candidates=cands,
        chosen="",
        rule="none",
        node=call.name,
        detail=detail,
    )
    for c in cands[: len(named)]:
        if c.supported:
            decision.chosen = c.kernel
            decision.rule = "policy.require" if mode == "require" else "policy.prefer"
            return decision
    if named and mode == "require" and not auto:
        reasons = "; ".join(f"{c.kernel}: {c.reason_code} ({c.detail})" for c in cands[: len(named)])
        raise PolicyViolation(
            f"KernelPolicy(mode='require') for op '{call.op}' ({call.name} on {device}, {dtypes}, {shapes}): "
            f"no required kernel can run it: {reasons}. Use mode='prefer' to fall back, or change the policy."
        )
    rest = [c for c in cands[len(named) :] if c.supported] if auto else []
    if not rest:
        decision.chosen, decision.rule = "torch", "fallback"
        why = "; ".join(f"{c.kernel}: {c.reason_code}" for c in cands if not c.supported)
        decision.detail = ", ".join(x for x in (detail, f"torch's own kernels ({why})") if x)
        return decision
    timing_ok = (
        strategy == "best_performance"
        and call.tensors[0].device.type == "cuda"
        and len(rest) > 1
        and not torch.cuda.is_current_stream_capturing()
        and not torch.compiler.is_compiling()
    )
    if timing_ok:
        timings = {}
        for c in rest:
            try:
                c.time_ms = time_kernel(c.kernel, call, func, args, kwargs)
                timings[c.kernel] = c.time_ms
            except Exception as e:  # noqa: BLE001 - a candidate failing to run is a verdict, recorded
                c.verdict, c.reason_code, c.detail = (
                    "rejected",
                    "python_supports_error",
                    f"failed when timed: {e}",
                )
        timed = [c for c in rest if c.supported and c.time_ms is not None]
        if timed:
            best = min(timed, key=lambda c: c.time_ms)
            decision.chosen, decision.rule, decision.timings = best.kernel, "auto.best_performance", timings
            return decision
    decision.chosen, decision.rule = rest[0].kernel, "auto.first_supported"
    if strategy == "best_performance":
        decision.detail = ", ".join(
            x for x in (detail, "timing skipped (CPU, capture, compile or one candidate)") if x
        )
    return decision
