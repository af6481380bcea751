"""How one torch call is routed under a KernelPolicy: parse, ask the Dispatcher, run.

For each routed torch function this module builds the call's OpContext and asks the
C++ Dispatcher (the one selector, with the one decision log) to choose among the
kernels a torch call can run (:mod:`._kernels`); then it runs the choice. Under
``best_performance`` it times the Dispatcher's candidates on torch's stream (forward
and backward) and hands the timings back for the Dispatcher to choose.
:mod:`.policy` owns the state and the TorchFunctionMode that calls :func:`select`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from .. import _core
from ..dispatch import Decision
from . import _kernels
from ._calls import _FUNCS, FUNC_OPS, Call, _matmul_call, context, parse_call, routed_functions
from .ops.attention import attention_forward, draw_rng_state
from .ops.layernorm import layer_norm_forward
from .ops.linear import linear_forward
from .ops.matmul import matmul_forward

# (Call, parse_call, context, ... live in ._calls, which the ops' support checks use too;
# routing re-exports them.)
__all__ = [
    "FUNC_OPS",
    "Call",
    "context",
    "parse_call",
    "routed_functions",
    "run",
    "run_dispatched",
    "select",
    "time_kernel",
]


def _sdpa_backend(kernel: str):
    from torch.nn.attention import SDPBackend

    return {
        "torch_flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }[kernel]


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
        if _FUNCS.get(func) == "linear":  # the weight as it is (ops.linear), not b = weight.t()
            w = args[1] if len(args) > 1 else kwargs["weight"]
            if w.dtype != f["b"].dtype:  # autocast_view's cast of b, on the weight itself
                w = w.to(f["b"].dtype)
            return linear_forward(f["a"], w, f["bias"], kernel)
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


#: Launches per timed block, and blocks per candidate (the median block counts).
TIMING_LAUNCHES = 10
TIMING_REPEATS = 7
REGIMES = ("eager", "captured")


def _step(kernel: str, call: Call, func: Callable, args: tuple, kwargs: dict) -> Callable[[], None]:
    """One forward (and backward, when inputs need grad) of ``kernel`` on this call."""
    # The leaves are the call's own argument tensors: under autocast ``call`` is the
    # autocast view (its tensors are casts the arguments do not contain), and run()
    # casts the swapped arguments again.
    originals = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
    grads = [t for t in originals if t.requires_grad]
    if not grads:

        def forward() -> None:
            with torch.no_grad():
                run(kernel, call, func, args, kwargs)

        return forward
    detached = {id(t): t.detach().requires_grad_(True) for t in grads}

    def swap(x):
        return detached.get(id(x), x) if isinstance(x, torch.Tensor) else x

    targs = tuple(swap(a) for a in args)
    tkw = {k: swap(v) for k, v in kwargs.items()}
    tcall = parse_call(func, targs, tkw)
    leaves = list(detached.values())

    def step() -> None:
        out = run(kernel, tcall, func, targs, tkw)
        torch.autograd.grad(out, leaves, torch.ones_like(out))

    return step


def _median_and_noise(per_launch: list[float]) -> tuple[float, float]:
    s = sorted(per_launch)
    n = len(s)
    # noise: half the spread of the middle blocks (robust to one slow outlier block)
    lo, hi = s[n // 4], s[(3 * n) // 4]
    return float(statistics.median(s)), float(hi - lo) / 2


def time_kernel(
    kernel: str,
    call: Call,
    func: Callable,
    args: tuple,
    kwargs: dict,
    regime: str = "eager",
    launches: int = TIMING_LAUNCHES,
    repeats: int = TIMING_REPEATS,
) -> tuple[float, float]:
    """(median device ms per launch, noise ms) of ``kernel`` on this call, in ``regime``.

    Device time from CUDA events on torch's stream around blocks of ``launches``
    back-to-back launches (forward, plus backward when inputs need grad):
    ``eager`` launches them from Python as an eager model does, so a kernel whose
    host cost exceeds its run time pays for it; ``captured`` captures the block into
    a CUDA graph and times replays, which is what a captured model runs. The noise is
    half the interquartile spread of the per-launch times over ``repeats`` blocks.
    """
    step = _step(kernel, call, func, args, kwargs)
    for _ in range(3):  # warm up: lazy initialisation, allocator, cuBLAS handles
        step()
    torch.cuda.synchronize()
    if regime == "captured":
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step()  # warm up on the capture stream too
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            for _ in range(launches):
                step()

        def block() -> None:
            graph.replay()
    else:

        def block() -> None:
            for _ in range(launches):
                step()

    block()
    per_launch = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        block()
        end.record()
        end.synchronize()
        per_launch.append(start.elapsed_time(end) / launches)
    return _median_and_noise(per_launch)


# ---- the question for the Dispatcher ----------------------------------------------------------
def _timing_skipped(call: Call, pool: Sequence[str]) -> str:
    """Why ``best_performance`` cannot time this call here ("" when it can)."""
    if call.tensors[0].device.type != "cuda":
        return "CPU tensors: timing runs on CUDA"
    if len(pool) < 2:
        return "one candidate"
    if torch.cuda.is_current_stream_capturing() or torch.compiler.is_compiling():
        return "inside a CUDA graph capture or torch.compile"
    return ""


def select(
    call: Call,
    policy: Any,
    named: Sequence[str],
    best_performance: bool,
    hint: str,
    func: Callable,
    args: tuple,
    kwargs: dict,
    regime: str = "eager",
) -> Decision:
    """Asks the Dispatcher which kernel runs ``call`` under ``policy``; returns the Decision.

    ``named``: the kernels the policy names for the op ("auto" excluded). Raises
    UnsupportedOperationError (mode 'require') when none of them can run the call.
    ``regime``: how the model runs ("eager" or "captured"), which best_performance
    times the candidates in (:func:`time_kernel`).
    """
    call = autocast_view(call)
    ctx = context(call)
    dispatcher = _core.Dispatcher.instance()
    # A call form only torch runs (addmm's beta/alpha, out=, a vector operand) offers
    # the Dispatcher torch's kernel alone.
    plain = call.op != "matmul" or call.fields["plain"]
    opts = {
        "runnable": _kernels.RUNNABLE[call.op] if plain else [_kernels.FALLBACK],
        "fallback_kernel": _kernels.FALLBACK,
        "note": f"precision_hint={hint}" if hint else "",
    }
    with _kernels.checking(call):
        if not best_performance:
            return dispatcher.select(ctx, policy, **opts)
        opts["regime"] = regime  # the Dispatcher keeps tunings per regime
        try:
            preview = dispatcher.select(ctx, policy, record=False, **opts)
        except _core.UnsupportedOperationError:
            return dispatcher.select(ctx, policy, **opts)  # records the refusal, raises again
        if preview.rule != _core.rule.AUTO_FIRST_SUPPORTED:  # a named kernel, a pin or a fallback
            return dispatcher.select(ctx, policy, **opts)
        pool = [c.kernel for c in preview.candidates[len(named) :] if c.supported]
        skipped = _timing_skipped(call, pool)
        if skipped:
            return dispatcher.select(ctx, policy, untimed_reason=skipped, **opts)
        timings: dict[str, float] = {}
        noise: dict[str, float] = {}
        failures: dict[str, str] = {}
        for kernel in pool:  # the Dispatcher's order: ties go to the earlier one
            try:
                timings[kernel], noise[kernel] = time_kernel(kernel, call, func, args, kwargs, regime)
            except Exception as e:  # noqa: BLE001 - a candidate failing to run is a verdict, recorded
                failures[kernel] = str(e)
        return dispatcher.select(ctx, policy, timings=timings, failures=failures, noise=noise, **opts)


# ---- running a kernel for a dispatch (the registered kernels' functions) -------------------
def _torch_matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    out = torch.matmul(a, b)
    return out if bias is None else out + bias


def run_dispatched(op: str, kernel: str, tensors: tuple, attrs: dict) -> Any:
    """Runs ``kernel`` on torch tensors in OpContext order (what a dispatch hands it)."""
    if op == "matmul":
        a, b, *rest = tensors
        bias = rest[0] if rest else None
        return run(kernel, _matmul_call("matmul", a, b, bias, True), _torch_matmul, (a, b, bias), {})
    if op == "attention":
        q, k, v, *rest = tensors
        kwargs = {
            "attn_mask": rest[0] if rest and rest[0].numel() > 0 else None,
            "dropout_p": float(attrs.get("dropout_p", 0.0)),
            "is_causal": bool(attrs.get("is_causal", 0)),
            "scale": attrs.get("scale"),
            "enable_gqa": q.dim() == 4 and k.dim() == 4 and q.shape[1] != k.shape[1],
        }
        func, args = F.scaled_dot_product_attention, (q, k, v)
    else:
        x, *rest = tensors
        axis = int(attrs.get("axis", -1))
        ns = list(x.shape[axis:])
        w = rest[0] if rest and rest[0].numel() > 0 else None
        b = rest[1] if len(rest) > 1 else None
        func, args = F.layer_norm, (x, ns, w, b, float(attrs.get("epsilon", 1e-5)))
        kwargs = {}
    call = parse_call(func, args, kwargs)
    assert call is not None
    return run(kernel, call, func, args, kwargs)


_kernels.register(run_dispatched)


# ---- lock hook (xpuruntime.lock.routed) ----------------------------------------------------
#: Called with every routed Decision while set_kernel_policy(lock=...) holds; it raises
#: LockViolationError to refuse a decision that differs from the lock.
lock_hook: Callable[[Decision], None] | None = None
_select_unlocked = select


def select(*args: Any, **kwargs: Any) -> Decision:
    """:func:`_select_unlocked`, then the lock's check of its decision (when a lock holds)."""
    decision = _select_unlocked(*args, **kwargs)
    hook = lock_hook
    if hook is not None:
        hook(decision)
    return decision
