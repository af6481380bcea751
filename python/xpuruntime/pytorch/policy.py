"""Kernel policy for PyTorch (seed 002 §4.1): ``set_kernel_policy`` and friends.

While a policy is set, a :class:`torch.overrides.TorchFunctionMode` sits on the
calling thread's torch-function stack and routes ``torch.matmul``, ``mm``,
``bmm``, ``addmm`` and ``F.linear`` (op key ``matmul``),
``F.scaled_dot_product_attention`` (``attention``) and ``F.layer_norm``
(``layernorm``) to the kernels the policy names:

* matmul: ``cublasLt`` (ours, bias fused as an epilogue for linear) | ``cublas`` | ``torch``
* attention: ``flash_v2`` (ours) | ``cudnn`` | ``torch_flash`` | ``efficient`` | ``math``
* layernorm: ``fused`` (ours) | ``torch``

The C++ Dispatcher chooses, as it does for inference nodes: each distinct case (op,
function, device, dtypes, shapes, flags) is decided once and recorded as a
:class:`xpuruntime.dispatch.Decision` in the process log, and later calls of the case
are a lookup counted in the decision's ``hits`` (:func:`routing_counts` counts per
kernel). A kernel that cannot run a case is skipped with its reason; with
``mode='prefer'`` the call falls back (to the next kernel, or to torch's own), with
``mode='require'`` it raises :class:`xpuruntime.UnsupportedOperationError`. ``"auto"``
lets ``auto_strategy`` choose (``first_supported``, or ``best_performance``: each
supported kernel is timed once per case on the GPU, forward and backward, and the
Dispatcher keeps the fastest).

:func:`clear_kernel_policy` pops the mode: torch then runs exactly as it does
without xpuruntime (nothing stays registered). Like torch's own modes, the policy
applies to the thread that set it.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .. import _core
from ..dispatch import DecisionLog
from ..policies import coerce
from . import _kernels, _log, _routing
from ._log import _tensor_key, record_direct_fallback

__all__ = [
    "clear_decision_log",
    "clear_kernel_policy",
    "decision_log",
    "explain",
    "get_kernel_policy",
    "get_precision_hint",
    "record_direct_fallback",
    "routing_counts",
    "set_kernel_policy",
    "set_precision_hint",
]


class _PolicyView:
    """What routing reads from a policy: the core object, the ops it names and how."""

    def __init__(self, policy: Any) -> None:
        self.core = coerce.core_kernel_policy(policy)
        self.named: dict[str, list[str]] = {}
        for op, names in dict(self.core.preferences).items():
            names = [names] if isinstance(names, str) else [str(n) for n in names]
            self.named[op] = [n for n in names if n != _core.AUTO_KERNEL]
            runnable = _kernels.RUNNABLE.get(op)
            if runnable is None:
                continue
            for n in self.named[op]:
                if n not in runnable:
                    raise _core.PolicyError(
                        f"kernel '{n}' for op '{op}' has no PyTorch routing; valid choices: "
                        f"{', '.join(runnable)}, {_core.AUTO_KERNEL}"
                    )
        self.best = "best" in str(getattr(self.core, "auto_strategy_name", "")).lower()


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.policy: Any = None
        self.view: _PolicyView | None = None
        self.mode: _PolicyMode | None = None
        self.precision_hint = ""
        self.saved_dispatcher_policy: Any = None


_state = _State()


class _PolicyMode(TorchFunctionMode):
    """Routes the policy's torch functions; everything else passes through untouched."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        view = _state.view
        # Cheap checks first: most calls through the mode are not routed at all.
        op = _routing.FUNC_OPS.get(func) if view is not None else None
        if op is None or op not in view.named:
            return func(*args, **kwargs)
        call = _routing.parse_call(func, args, kwargs)
        if call is None:
            return func(*args, **kwargs)
        autocast = _routing.autocast_state(call)
        # The cases are forgotten whenever the policy changes, so the key needs neither
        # the policy nor its fingerprint; the precision hint is recorded, so it is in.
        key = (
            func,
            tuple(_tensor_key(t) for t in call.tensors),
            call.extra_key,
            autocast,
            _state.precision_hint,
        )
        compiling = torch.compiler.is_compiling()
        entry = _log.cases.get(key)
        if entry is None:
            try:
                decision = _routing.select(
                    call, view.core, view.named[op], view.best, _state.precision_hint, func, args, kwargs
                )
            except _core.InvalidArgumentError:
                return func(*args, **kwargs)  # a dtype the core has no name for: torch's call, untouched
            kernel = decision.chosen
            if not compiling:
                entry = _log.remember(key, kernel, decision.seq, call.op)
        else:
            kernel = entry.kernel
            if not compiling:
                entry.pending += 1
        if entry is not None and not compiling:
            _log.counts[entry.count_key] += 1
        try:
            return _routing.run(kernel, call, func, args, kwargs, autocast)
        except (_core.UnsupportedOperationError, _core.InvalidArgumentError) as e:
            # A kernel may only find out when it runs (no cuBLASLt algorithm for this
            # problem, a layout it refuses): under 'prefer' that is a fallback like
            # any other, recorded with the kernel's message. CUDA errors propagate.
            if kernel == _kernels.FALLBACK or str(view.core.mode) == "require" or compiling:
                raise
            _log.remember(key, _kernels.FALLBACK, 0, call.op)
            record_direct_fallback(
                call.op, kernel, (_core.reason.PYTHON_SUPPORTS_ERROR, str(e)), call.tensors
            )
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
        _log.forget_cases()
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
        _log.forget_cases()


def decision_log() -> DecisionLog:
    """The decisions routing recorded (and our fused ops falling back), with their hit
    counts: a view of the process log, where inference decisions are too
    (:func:`xpuruntime.dispatch.explain`)."""
    return _log.decisions()


def clear_decision_log() -> None:
    """Forgets routing's decisions, the per-case choices and the call counts."""
    _log.clear()


def explain() -> str:
    """The decision log as a plain-text table."""
    return decision_log().to_table(style="plain")


def routing_counts() -> dict[str, int]:
    """Calls routed per ``"op:kernel"`` since the last :func:`clear_decision_log`."""
    return dict(_log.counts)


def get_precision_hint() -> str:
    """The precision hint set by :func:`xpuruntime.pytorch.autocast` ("" outside it)."""
    return _state.precision_hint


def set_precision_hint(hint: str) -> str:
    """Sets the precision hint recorded with routing decisions; returns the previous one."""
    if hint not in ("", "fp32", "fp16", "bf16"):
        raise ValueError(f"precision hint must be 'fp32', 'fp16', 'bf16' or '', got {hint!r}")
    previous, _state.precision_hint = _state.precision_hint, hint
    return previous
