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
supported kernel is timed once per case on the GPU in device time, forward and
backward, in the ``regime`` the model runs in (eager launches or CUDA-graph replays);
the Dispatcher keeps the fastest, times within the measurement noise being a tie that
the earlier candidate wins, and the decision records every time, the margin and the
regime).

A routed call costs a cache hit: the case key (function, every argument's dtype,
shape, device, requires_grad and strides, scalars, autocast, precision hint), or for
the common call forms a C++ check of the tensors against the cases seen at the call's
site, finds the case's prepared launcher (:mod:`._prepared`), which for torch's own
kernel is the torch function itself; the Dispatcher is asked on the first call of a
case only. Under ``torch.compile`` the kernel is decided when the
graph is traced (and recorded then) and runs as our custom ops, without graph breaks;
the policy's fingerprint is a guard of the graph, so another policy retraces it. A
dimension dynamo made dynamic is specialized at a routed call (one static case per
size, decided at trace time).

While one of torch.optim's elementwise optimizers (AdamW, Adam, SGD, ...: they call no
routed function) steps or zeroes its gradients, the mode is off the thread's stack
(:mod:`._optim`): a mode sends every torch call through Python, and an optimizer step is
hundreds of them.

:func:`clear_kernel_policy` pops the mode: torch then runs exactly as it does
without xpuruntime (nothing stays registered). Like torch's own modes, the policy
applies to the thread that set it.
"""

from __future__ import annotations

import operator
import threading
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .. import _core
from ..dispatch import DecisionLog
from ..policies import coerce
from . import _kernels, _log, _optim, _prepared, _routing
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
        # What compiled graphs decided under (dynamo guards on it): the policy's
        # fingerprint and regime, so setting an equal policy again keeps the graphs.
        self.generation = ""
        self.regime = "eager"  # what best_performance times in (set_kernel_policy)
        self.profiling = 0  # > 0 inside xpuruntime.pytorch.profile(): per-call events
        self.lock_guard: Any = None  # set_kernel_policy(lock=...): xpuruntime.lock.routed
        self.user_policy: Any = None  # the policy as given (without the lock's pins)


_state = _State()


#: torch function -> op key, for the functions the current policy routes (filled by
#: set_kernel_policy, emptied by clear_kernel_policy): one lookup tells a routed call.
_routed: dict[Any, str] = {}
_lookup = _prepared.lookup
_Entry = _log.Entry


class _PolicyMode(TorchFunctionMode):
    """Routes the policy's torch functions; everything else passes through untouched."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        op = _routed.get(func)
        if op is None:  # most calls through the mode are not routed at all
            return func(*args, **kwargs) if kwargs else func(*args)
        if _is_compiling() or _tracing_state() is not None:
            return _compiled_call(_state.view, op, func, args, kwargs or {})
        return _eager_call(op, func, args, kwargs)


def _eager_call(op: str, func, args: tuple, kwargs: dict | None) -> Any:
    """A routed call outside torch.compile: the case's prepared launcher, or a miss."""
    # The hot path: the case's entry (_prepared.lookup), its launcher called like func.
    entry = _lookup(func, args, kwargs, _state.precision_hint)
    if type(entry) is not _Entry:  # a miss: what came back is the case key (or None)
        return _miss(_state.view, op, func, args, kwargs or {}, entry)
    entry.pending += 1
    try:
        if _state.profiling:
            with torch.profiler.record_function(f"xpuruntime.{entry.count_key}"):
                return entry.launch(*args, **kwargs) if kwargs else entry.launch(*args)
        return entry.launch(*args, **kwargs) if kwargs else entry.launch(*args)
    except (_core.UnsupportedOperationError, _core.InvalidArgumentError) as e:
        key = _prepared.case_key(func, args, kwargs, _state.precision_hint)
        return _run_failed(_state.view, op, func, args, kwargs or {}, key, entry.kernel, e)


_is_compiling = torch.compiler.is_compiling
_tracing_state = torch._C._get_tracing_state  # not None inside torch.jit.trace


def _miss(view: _PolicyView, op: str, func, args: tuple, kwargs: dict, key: tuple | None) -> Any:
    """A case seen for the first time: the Dispatcher decides (and records), then it runs."""
    call = _routing.parse_call(func, args, kwargs)
    if call is None:
        return func(*args, **kwargs)  # an unusual call form: torch's call, untouched
    autocast = _routing.autocast_state(call)
    if key is None:  # an argument without a cheap key: the coarser key of the parsed call
        key = (
            func,
            tuple(_tensor_key(t) for t in call.tensors),
            call.extra_key,
            autocast,
            _state.precision_hint,
        )
        entry = _log.cases.get(key)
        if entry is not None:
            entry.pending += 1
            return _run_parsed(view, op, func, args, kwargs, key, entry.kernel, call, autocast)
    try:
        decision = _routing.select(
            call,
            view.core,
            view.named[op],
            view.best,
            _state.precision_hint,
            func,
            args,
            kwargs,
            _state.regime,
        )
    except _core.InvalidArgumentError:
        return func(*args, **kwargs)  # a dtype the core has no name for: torch's call, untouched
    kernel = decision.chosen
    launch = _prepared.prepare(kernel, call, func, args, kwargs, autocast)
    entry = _log.remember(key, kernel, decision.seq, call.op, launch)
    _log.counts[entry.count_key] += 1
    if _state.profiling:
        with torch.profiler.record_function(f"xpuruntime.{entry.count_key}"):
            return _run_parsed(view, op, func, args, kwargs, key, kernel, call, autocast)
    return _run_parsed(view, op, func, args, kwargs, key, kernel, call, autocast)


def _run_parsed(view, op, func, args, kwargs, key, kernel, call, autocast) -> Any:
    try:
        return _routing.run(kernel, call, func, args, kwargs, autocast)
    except (_core.UnsupportedOperationError, _core.InvalidArgumentError) as e:
        return _run_failed(view, op, func, args, kwargs, key, kernel, e)


def _run_failed(view, op, func, args, kwargs, key, kernel: str, error: Exception) -> Any:
    """A kernel may only find out when it runs (no cuBLASLt algorithm for this problem,
    a layout it refuses): under 'prefer' that is a fallback like any other, recorded
    with the kernel's message, and the case runs torch's kernel from now on. CUDA
    errors propagate."""
    if kernel == _kernels.FALLBACK or str(view.core.mode) == "require":
        raise error
    tensors = tuple(a for a in args if isinstance(a, torch.Tensor))
    _log.remember(key, _kernels.FALLBACK, 0, op, _prepared.prepare_torch(func, args, kwargs))
    record_direct_fallback(op, kernel, (_core.reason.PYTHON_SUPPORTS_ERROR, str(error)), tensors)
    return func(*args, **kwargs)


# ---- torch.compile: decisions at trace time ---------------------------------------------------
def _spec(a: Any) -> Any:
    """A constant describing an argument (what dynamo can pass to a constant function).

    Sizes and strides go through ``operator.index``, which dynamo specializes: a
    dimension it made dynamic (``dynamic=True``, or automatic dynamic shapes after a
    recompile) becomes the traced value, guarded, so the routed call is one static case
    decided at trace time (``int()`` would keep it symbolic, which no constant function
    takes). The graph then recompiles for another size of such a dimension. Floats go
    through their exact hex form, which dynamo specializes likewise.
    """
    if isinstance(a, torch.Tensor):
        return (
            "tensor",
            str(a.dtype).replace("torch.", ""),
            tuple([_index(s) for s in a.shape]),
            tuple([_index(s) for s in a.stride()]),
            str(a.device),
            bool(a.requires_grad),
        )
    if isinstance(a, (tuple, list)):
        return ("seq", tuple(_spec(x) for x in a))
    if type(a) is int:
        return ("value", _index(a))
    if type(a) is float:  # an unspecialized float (a module's eps under dynamic=True)
        return ("value", float.fromhex(a.hex()))
    return ("value", a)


_index = operator.index


def _materialize(spec: tuple) -> Any:
    kind = spec[0]
    if kind == "tensor":
        _, dtype, shape, stride, device, grad = spec
        t = torch.empty_strided(shape, stride, dtype=getattr(torch, dtype), device=device)
        return t.requires_grad_(True) if grad else t
    if kind == "seq":
        return tuple(_materialize(x) for x in spec[1])
    return spec[1]


_compile_choices: dict[tuple, str] = {}


@torch.compiler.assume_constant_result
def _compile_time_kernel(
    func_index: int, arg_specs: tuple, kw_specs: tuple, hint: str, generation: str
) -> str:
    """The kernel a routed call runs in a graph being compiled, decided (and recorded)
    when the graph is traced: dynamo runs this function then and bakes its answer in.

    The Dispatcher and the torch-side support checks need tensors: empty tensors with the
    traced ones' dtypes, shapes, strides and devices stand for them. One decision per
    case and policy (dynamo may trace a frame more than once).
    """
    key = (func_index, arg_specs, kw_specs, hint, generation)
    kernel = _compile_choices.get(key)
    if kernel is not None:
        return kernel
    func = _routing.routed_functions()[func_index]
    view = _state.view
    args = tuple(_materialize(s) for s in arg_specs)
    kwargs = {k: _materialize(s) for k, s in kw_specs}
    call = _routing.parse_call(func, args, kwargs)
    kernel = _kernels.FALLBACK
    if call is not None and view is not None and call.op in view.named:
        try:
            decision = _routing.select(
                call, view.core, view.named[call.op], view.best, hint, func, args, kwargs, _state.regime
            )
            kernel = decision.chosen
            _log.note(decision.seq)
        except _core.InvalidArgumentError:
            pass  # a dtype the core has no name for: torch's call, untouched
    _compile_choices[key] = kernel
    return kernel


_FUNC_INDEX = {f: i for i, f in enumerate(_routing.routed_functions())}


def _compiled_call(view: _PolicyView, op: str, func, args: tuple, kwargs: dict) -> Any:
    """A routed call while torch.compile traces (or torch.jit traces): the kernel is
    decided at trace time and the call runs through our custom ops, which the graph
    records (the eager cache and its direct launches are not used). Sizes dynamo made
    dynamic are specialized at the routed call (:func:`_spec`)."""
    call = _routing.parse_call(func, args, kwargs)
    if call is None:
        return func(*args, **kwargs)
    if torch.compiler.is_compiling():
        arg_specs = tuple(_spec(a) for a in args)
        kw_specs = tuple((k, _spec(v)) for k, v in kwargs.items())
        kernel = _compile_time_kernel(
            _FUNC_INDEX[func], arg_specs, kw_specs, _state.precision_hint, _state.generation
        )
    else:  # torch.jit.trace: decided like an eager miss, not cached
        try:
            kernel = _routing.select(
                call,
                view.core,
                view.named[op],
                view.best,
                _state.precision_hint,
                func,
                args,
                kwargs,
                _state.regime,
            ).chosen
        except _core.InvalidArgumentError:
            return func(*args, **kwargs)
    return _routing.run(kernel, call, func, args, kwargs, _routing.autocast_state(call))


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


def set_kernel_policy(
    policy: Any = None, *, regime: str = "eager", lock: Any = None, frozen: bool = False, **kwargs: Any
) -> None:
    """Sets the kernel policy used while training with PyTorch.

    Args:
        policy: a :class:`xpuruntime.KernelPolicy`; None with no kwargs clears the policy.
        regime: how the model runs, ``"eager"`` or ``"captured"`` (whole steps replayed
            as CUDA graphs): ``best_performance`` times its candidates that way (eager:
            launched back to back from Python, host cost included; captured: replays of
            a captured block) and the decisions record it.
        lock: a lock file written by :func:`save_lock` (path or LockFile): every routed case
            it covers runs its locked kernel, and a decision that differs raises
            ``LockViolationError`` naming the case (see :mod:`xpuruntime.lock.routed`).
            Without ``policy`` the lock's own policy is used.
        frozen: with ``lock``: a routed case the lock does not cover raises too.
        **kwargs: ``op=kernel`` (or a list of kernels) built into a KernelPolicy, plus
            optional ``mode='prefer'|'require'`` and ``auto_strategy=...``.

    Examples::

        set_kernel_policy(KernelPolicy(matmul="cublasLt", attention="flash_v2"))
        set_kernel_policy(matmul="cublasLt", attention="flash_v2", layernorm="fused")
    """
    if policy is not None and kwargs:
        raise TypeError("set_kernel_policy takes a policy or op=kernel keywords, not both")
    if regime not in _routing.REGIMES:
        raise ValueError(f"regime must be one of {', '.join(_routing.REGIMES)}, got {regime!r}")
    guard = _lock_guard(lock, frozen)
    if policy is None and not kwargs and guard is not None:
        policy = guard.locked_policy()
    if policy is None and not kwargs:
        clear_kernel_policy()
        return
    if policy is None:
        policy = _make_policy(dict(kwargs))
    if hasattr(policy, "validate"):
        policy.validate()
    user_policy = policy
    if guard is not None:
        policy = guard.prepare(policy, guard.lock.device)  # the lock's choices as pins
    view = _PolicyView(policy)
    with _state.lock:
        _optim.resume()  # a mode an optimizer step took off the stack goes back first
        _state.lock_guard, _state.user_policy = guard, user_policy
        _routing.lock_hook = guard.check if guard is not None else None
        dispatcher = _core.Dispatcher.instance()
        if _state.policy is None:
            _state.saved_dispatcher_policy = dispatcher.get_policy()
        dispatcher.set_policy(policy)  # the C++ side (inference, _core.ops) sees the same policy
        _state.policy, _state.view = policy, view
        _state.regime = regime
        _state.generation = f"{view.core.fingerprint}/{regime}"
        _log.forget_cases()
        _compile_choices.clear()
        routed = {f: op for f, op in _routing.FUNC_OPS.items() if op in view.named}
        if routed != _routed:  # left alone when equal: compiled graphs guard on it
            _routed.clear()
            _routed.update(routed)
        if _state.mode is None:
            _state.mode = _PolicyMode()
            _state.mode.__enter__()
            _optim.install(_current_mode)


def _current_mode() -> Any:
    """The policy's mode (None without a policy): what :mod:`._optim` suspends."""
    return _state.mode


def _lock_guard(lock: Any, frozen: bool) -> Any:
    if lock is None and not frozen:
        return None
    if lock is None:
        raise _core.InvalidArgumentError(
            "set_kernel_policy(frozen=True) needs lock=FILE: frozen refuses every routed case a lock "
            "does not cover; write one with xpuruntime.pytorch.save_lock(path)"
        )
    from ..lock.routed import RoutedLockGuard

    return RoutedLockGuard.open(lock, frozen)


def save_lock(path: Any) -> Any:
    """Writes the lock of the routed calls decided so far to ``path`` (a str or
    os.PathLike): one entry per case with its kernel, algorithm and rule, and under
    best_performance its timings and margin. Returns the
    :class:`xpuruntime.lock.LockFile`; replay it with ``set_kernel_policy(lock=path)``.

    Raises InvalidArgumentError when no policy is set or no routed call was decided.
    """
    from ..lock.routed import save_lock as write

    policy = _state.user_policy if _state.user_policy is not None else _state.policy
    return write(path, policy, decision_log())


def get_kernel_policy() -> Any:
    """The policy set by :func:`set_kernel_policy`, or None."""
    return _state.policy


def clear_kernel_policy() -> None:
    """Removes the policy: torch's functions run exactly as without xpuruntime."""
    with _state.lock:
        _optim.uninstall()  # a suspended mode goes back on the stack, to come off below
        if _state.mode is not None:
            _state.mode.__exit__(None, None, None)
            _state.mode = None
        if _state.policy is not None:
            _core.Dispatcher.instance().set_policy(_state.saved_dispatcher_policy)
            _state.saved_dispatcher_policy = None
        _state.policy, _state.view = None, None
        _state.lock_guard, _state.user_policy = None, None
        _routing.lock_hook = None
        _state.generation = ""
        _routed.clear()
        _log.forget_cases()
        _compile_choices.clear()


def decision_log() -> DecisionLog:
    """The decisions routing recorded (and our fused ops falling back), with their hit
    counts: a view of the process log, where inference decisions are too
    (:func:`xpuruntime.dispatch.explain`)."""
    return _log.decisions()


def clear_decision_log() -> None:
    """Forgets routing's decisions, the per-case choices and the call counts."""
    _log.clear()
    _compile_choices.clear()


def explain() -> str:
    """The decision log as a plain-text table."""
    return decision_log().to_table(style="plain")


def routing_counts() -> dict[str, int]:
    """Calls routed per ``"op:kernel"`` since the last :func:`clear_decision_log`."""
    _log.flush()
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
