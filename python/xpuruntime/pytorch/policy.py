"""Kernel policy for PyTorch (seed 002 §4.1): ``set_kernel_policy`` and friends.

While a policy is set, a :class:`torch.overrides.TorchFunctionMode` sits on the
calling thread's torch-function stack and routes ``torch.matmul``, ``mm``,
``bmm``, ``addmm`` and ``F.linear`` (op key ``matmul``),
``F.scaled_dot_product_attention`` (``attention``) and ``F.layer_norm``
(``layernorm``) to the kernels the policy names:

* matmul: ``cublasLt`` (ours, bias fused as an epilogue for linear) | ``cublas`` | ``torch``
* attention: ``flash_v2`` (ours) | ``cudnn`` | ``torch_flash`` | ``efficient`` | ``math``
* layernorm: ``fused`` (ours) | ``torch``

Every routing is recorded as a :class:`xpuruntime.dispatch.Decision`: once per
distinct case (op, function, device, dtypes, shapes, flags), since the same case
always routes the same way; :func:`routing_counts` counts the calls. A kernel that
cannot run a case is skipped with its reason; with ``mode='prefer'`` the call
falls back (to the next kernel, or to torch's own), with ``mode='require'`` it
raises :class:`xpuruntime.UnsupportedOperationError`. ``"auto"`` lets
``auto_strategy`` choose (``first_supported``, or ``best_performance``: each
supported kernel is timed once per case on the GPU and the fastest kept).

:func:`clear_kernel_policy` pops the mode: torch then runs exactly as it does
without xpuruntime (nothing stays registered). Like torch's own modes, the policy
applies to the thread that set it.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .. import _core
from ..dispatch import Candidate, Decision, DecisionLog
from . import _routing

__all__ = [
    "clear_decision_log",
    "clear_kernel_policy",
    "decision_log",
    "explain",
    "get_kernel_policy",
    "get_precision_hint",
    "routing_counts",
    "set_kernel_policy",
    "set_precision_hint",
]


class _PolicyView:
    """What routing reads from a policy: op -> kernel names, mode and auto strategy."""

    def __init__(self, policy: Any) -> None:
        internal = policy._get_internal() if hasattr(policy, "_get_internal") else policy
        prefs: dict[str, list[str]] = {}
        for op, names in dict(internal.preferences).items():
            op = _routing.OP_ALIASES.get(op, op)
            prefs[op] = [names] if isinstance(names, str) else [str(n) for n in names]
        self.prefs = prefs
        self.mode = str(getattr(internal, "mode", "prefer"))
        strategy = getattr(internal, "auto_strategy_name", None)
        if strategy is None:
            strategy = str(getattr(internal, "auto_strategy", "first_supported"))
        self.strategy = "best_performance" if "best" in str(strategy).lower() else "first_supported"
        self.fingerprint = str(getattr(internal, "fingerprint", ""))
        for op, names in prefs.items():
            if op not in _routing.OP_KERNELS:
                continue
            for n in names:
                if n != "auto" and n not in _routing.OP_KERNELS[op]:
                    raise _core.PolicyError(
                        f"kernel '{n}' for op '{op}' has no PyTorch routing; valid choices: "
                        f"{', '.join(_routing.OP_KERNELS[op])}, auto"
                    )


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.policy: Any = None
        self.view: _PolicyView | None = None
        self.mode: _PolicyMode | None = None
        self.log = DecisionLog(capacity=4096)
        self.cache: dict[tuple, str] = {}
        self.counts: collections.Counter[str] = collections.Counter()
        self.precision_hint = ""
        self.saved_dispatcher_policy: Any = None


_state = _State()


def _tensor_key(t: Any) -> Any:
    # Cheap and hashable: this runs on every routed call.
    if isinstance(t, torch.Tensor):
        return (t.get_device(), t.dtype, t.shape, t.requires_grad)  # get_device: -1 on CPU
    return repr(t) if isinstance(t, (int, float, bool, str, type(None))) else type(t).__name__


class _PolicyMode(TorchFunctionMode):
    """Routes the policy's torch functions; everything else passes through untouched."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        view = _state.view
        # Cheap checks first: most calls through the mode are not routed at all.
        op = _routing.FUNC_OPS.get(func) if view is not None else None
        if op is None or op not in view.prefs:
            return func(*args, **kwargs)
        call = _routing.parse_call(func, args, kwargs)
        if call is None:
            return func(*args, **kwargs)
        autocast = _routing.autocast_state(call)
        # The cache is cleared whenever the policy changes, so the key needs neither
        # the policy nor its fingerprint; the precision hint is recorded, so it is in.
        key = (
            func,
            tuple(_tensor_key(t) for t in call.tensors),
            call.extra_key,
            autocast,
            _state.precision_hint,
        )
        kernel = _state.cache.get(key)
        if kernel is None:
            try:
                decision = _routing.select(
                    call,
                    view.prefs[call.op],
                    view.mode,
                    view.strategy,
                    _state.precision_hint,
                    func,
                    args,
                    kwargs,
                )
            except _routing.PolicyViolation as e:
                raise _core.UnsupportedOperationError(str(e)) from None
            kernel = decision.chosen
            decision.key = repr((call.op, call.name, key[1], call.extra_key))
            if not torch.compiler.is_compiling():
                _state.cache[key] = kernel
                _state.log.append(decision)
        if not torch.compiler.is_compiling():
            _state.counts[f"{call.op}:{kernel}"] += 1
        try:
            return _routing.run(kernel, call, func, args, kwargs, autocast)
        except (_core.UnsupportedOperationError, _core.InvalidArgumentError) as e:
            # A kernel may only find out when it runs (no cuBLASLt algorithm for this
            # problem, a layout it refuses): under 'prefer' that is a fallback like
            # any other, recorded with the kernel's message. CUDA errors propagate.
            if kernel == "torch" or view.mode == "require" or torch.compiler.is_compiling():
                raise
            _state.cache[key] = "torch"
            record_direct_fallback(call.op, kernel, ("python_supports_error", str(e)), call.tensors)
            return func(*args, **kwargs)


def _make_policy(kwargs: dict[str, Any]) -> Any:
    mode = kwargs.pop("mode", None)
    strategy = kwargs.pop("auto_strategy", None)
    try:
        from ..policies import KernelPolicy  # the Python wrapper, when present
    except ImportError:
        KernelPolicy = None
    if KernelPolicy is not None:
        extra = {k: v for k, v in (("mode", mode), ("auto_strategy", strategy)) if v is not None}
        return KernelPolicy(**kwargs, **extra)
    policy = _core.KernelPolicy(**kwargs)
    if mode is not None:
        policy.mode = mode
    if strategy is not None:
        policy.auto_strategy_name = strategy
    return policy


def set_kernel_policy(policy: Any = None, **kwargs: Any) -> None:
    """Sets the kernel policy used while training with PyTorch.

    Args:
        policy: a :class:`xpuruntime.KernelPolicy`; None with no kwargs clears the policy.
        **kwargs: ``op=kernel`` (or a list of kernels) built into a KernelPolicy, plus
            optional ``mode='prefer'|'require'`` and ``auto_strategy=...``.

    Examples::

        set_kernel_policy(KernelPolicy(matmul="cublasLt", attention="flash_v2"))
        set_kernel_policy(matmul="cublasLt", attention="flash_v2", layernorm="fused")
    """
    if policy is not None and kwargs:
        raise TypeError("set_kernel_policy takes a policy or op=kernel keywords, not both")
    if policy is None and not kwargs:
        clear_kernel_policy()
        return
    if policy is None:
        policy = _make_policy(dict(kwargs))
    if hasattr(policy, "validate"):
        policy.validate()
    view = _PolicyView(policy)
    with _state.lock:
        dispatcher = _core.Dispatcher.instance()
        if _state.policy is None:
            _state.saved_dispatcher_policy = dispatcher.get_policy()
        dispatcher.set_policy(policy)  # the C++ side (inference, _core.ops) sees the same policy
        _state.policy, _state.view = policy, view
        _state.cache.clear()
        if _state.mode is None:
            _state.mode = _PolicyMode()
            _state.mode.__enter__()


def get_kernel_policy() -> Any:
    """The policy set by :func:`set_kernel_policy`, or None."""
    return _state.policy


def clear_kernel_policy() -> None:
    """Removes the policy: torch's functions run exactly as without xpuruntime."""
    with _state.lock:
        if _state.mode is not None:
            _state.mode.__exit__(None, None, None)
            _state.mode = None
        if _state.policy is not None:
            _core.Dispatcher.instance().set_policy(_state.saved_dispatcher_policy)
            _state.saved_dispatcher_policy = None
        _state.policy, _state.view = None, None
        _state.cache.clear()


def decision_log() -> DecisionLog:
    """The decisions recorded by routing (and by fused ops falling back)."""
    return _state.log


def clear_decision_log() -> None:
    """Forgets recorded decisions, the per-case cache and the call counts."""
    _state.log.clear()
    _state.cache.clear()
    _state.counts.clear()


def explain() -> str:
    """The decision log as a plain-text table."""
    return _state.log.to_table(style="plain")


def routing_counts() -> dict[str, int]:
    """Calls routed per ``"op:kernel"`` since the last :func:`clear_decision_log`."""
    return dict(_state.counts)


def get_precision_hint() -> str:
    """The precision hint set by :func:`xpuruntime.pytorch.autocast` ("" outside it)."""
    return _state.precision_hint


def set_precision_hint(hint: str) -> str:
    """Sets the precision hint recorded with routing decisions; returns the previous one."""
    if hint not in ("", "fp32", "fp16", "bf16"):
        raise ValueError(f"precision hint must be 'fp32', 'fp16', 'bf16' or '', got {hint!r}")
    previous, _state.precision_hint = _state.precision_hint, hint
    return previous


def record_direct_fallback(op: str, kernel: str, why: tuple[str, str], tensors: tuple) -> None:
    """Records that a direct call of one of our ops ran torch's kernel instead (once per case)."""
    if torch.compiler.is_compiling():
        return
    ts = [t for t in tensors if isinstance(t, torch.Tensor)]
    key = ("direct", op, kernel, tuple(_tensor_key(t) for t in ts), why[0])
    if key in _state.cache:
        return
    _state.cache[key] = "torch"
    _state.log.append(
        Decision(
            op=op,
            device=str(ts[0].device) if ts else "",
            dtypes=[str(t.dtype).replace("torch.", "") for t in ts],
            shapes=[list(t.shape) for t in ts],
            candidates=[Candidate(kernel, "rejected", why[0], why[1]), Candidate("torch", "supported")],
            chosen="torch",
            rule="fallback",
            node=f"xpuruntime.pytorch.ops.fused_{op}",
            detail=f"{kernel} cannot run this case: {why[1]}",
        )
    )
