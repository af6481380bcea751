"""The policy's mode off the stack while a torch.optim optimizer steps or zeroes its
gradients (issue 31).

Any torch function mode on a thread's stack sends every overridable torch call of that
thread through Python: not only the routed functions but every tensor attribute read
and every op. An optimizer step is hundreds of such calls (AdamW over GPT-2 small's 148
parameters: about a thousand, ``p.grad`` reads, ``torch.is_complex``, the ``_foreach``
ops), none of them routed, each paying a Python round trip in the mode: on a host-bound
eager step that is milliseconds a step (benchmarks/bench_routed_overhead.py's
``step_phases``: the calls through the mode per phase, the host time of each).

torch.optim's elementwise optimizers (:data:`QUIET`) call no routed function in
``step()``, so while one of them steps the mode comes off the thread's stack and goes
back when the step returns, which changes nothing about what is routed or recorded.
Only when that is sure: the optimizer's exact class is in :data:`QUIET` (a subclass
may override ``step``), ``step`` is called without a closure (a closure runs the model),
neither the optimizer nor anyone else has step hooks (hooks run inside the step), the
policy's mode is the top of this thread's stack (another thread's step, or a mode the
user pushed above ours, is left alone) and dynamo is not tracing.

``zero_grad()`` of a :data:`QUIET` optimizer (``p.grad`` read and set per parameter:
about three hundred calls a GPT-2-small step) likewise runs with the mode off: torch has
no hook there, so while a policy is set ``torch.optim.Optimizer.zero_grad`` is a wrapper
that takes the mode off around the original in a ``try``/``finally`` (same conditions:
exact class, our mode on top, not tracing); :func:`uninstall` puts the original back.

A step that raises skips the post hook. Its mode goes back at the first of: the step's
frame being freed (the guard rides on the step's argument tuple, which the frame holds:
when the handler of the exception ends, unless its traceback is kept), the next
``nn.Module`` call on the thread (a global forward pre-hook registered only while a step
is suspended: the next forward, before any routed call of a model made of modules), the
next optimizer step, or a policy set or cleared. A model of bare functions that keeps
the exception alive (its traceback) and calls routed functions before any of these runs
them unrouted.
"""

from __future__ import annotations

import functools
import threading
import weakref
from typing import Any

import torch

__all__ = ["QUIET", "install", "resume", "uninstall"]

_C = torch._C
_stack_len = _C._len_torch_function_stack
_stack_at = _C._get_function_stack_at
_pop = _C._pop_torch_function_stack
_push = _C._push_on_torch_function_stack
_is_compiling = torch.compiler.is_compiling


def _quiet_classes() -> frozenset[type]:
    names = (
        "SGD", "Adam", "AdamW", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam",
        "RMSprop", "Rprop", "ASGD", "SparseAdam",
    )  # fmt: skip
    return frozenset(getattr(torch.optim, n) for n in names if hasattr(torch.optim, n))


#: Optimizers whose ``step()`` calls no routed function (elementwise and foreach ops
#: only). Not listed: LBFGS (its closure runs the model), Adafactor and Muon (matmuls).
QUIET: frozenset[type] = _quiet_classes()


class _Suspension:
    """The mode taken off one thread's stack for one step; :meth:`resume` puts it back once."""

    __slots__ = ("__weakref__", "done", "mode", "module_hook", "thread")

    def __init__(self, mode: Any) -> None:
        self.mode, self.thread, self.done = mode, threading.get_ident(), False
        self.module_hook: Any = None

    def resume(self) -> None:
        global _current
        if self.done:
            return
        if threading.get_ident() != self.thread:  # freed elsewhere: its thread resumes it
            return
        self.done = True
        if _current is not None and _current() is self:
            _current = None
        if self.module_hook is not None:
            self.module_hook.remove()
            self.module_hook = None
        if _owner is not None and _owner() is self.mode:  # still the policy's mode
            _push(self.mode)

    def __del__(self) -> None:  # the step raised: its frame, which held the args, is gone
        self.resume()


class _StepArgs(tuple):
    """The step's positional arguments, carrying the suspension (``guard``)."""

    guard: _Suspension


#: The suspension in force (weakly: the raising step's frame must be its one owner).
_current: weakref.ref[_Suspension] | None = None
_owner: Any = None  # a callable returning the policy's current mode (or None)
_handles: list[Any] = []


def _pre_hook(opt: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    global _current
    if _is_compiling():  # dynamo traces the step: the mode is part of what it traces
        return None
    stale = _current() if _current is not None else None
    if stale is not None:  # a step that raised, its exception still held: its mode goes back
        stale.resume()
    mode = _owner() if _owner is not None else None
    if mode is None or type(opt) not in QUIET:
        return None
    if (len(args) > 1 and args[1] is not None) or kwargs.get("closure") is not None:
        return None  # a closure runs the model: its calls are routed
    if opt._optimizer_step_pre_hooks or opt._optimizer_step_post_hooks or not _only_ours():
        return None
    n = _stack_len()
    if n == 0 or _stack_at(n - 1) is not mode:
        return None
    _pop()
    guard = _Suspension(mode)
    _current = weakref.ref(guard)
    guard.module_hook = torch.nn.modules.module.register_module_forward_pre_hook(_module_hook(_current))
    held = _StepArgs(args)
    held.guard = guard
    return held, kwargs


def _module_hook(ref: weakref.ref[_Suspension]) -> Any:
    def resume_before_forward(module: Any, args: Any) -> None:
        # a module called while a step is suspended: the step raised (a step of a QUIET
        # optimizer calls no module) and a forward begins
        guard = ref()
        if guard is not None and threading.get_ident() == guard.thread:
            guard.resume()

    return resume_before_forward


def _post_hook(opt: Any, args: tuple, kwargs: dict) -> None:
    guard = getattr(args, "guard", None)
    if guard is not None:
        guard.resume()


def _only_ours() -> bool:
    from torch.optim import optimizer as o

    return len(o._global_optimizer_pre_hooks) == 1 and len(o._global_optimizer_post_hooks) == 1


_zero_grad_installed: Any = None  # our wrapper, while it is torch.optim.Optimizer.zero_grad


def _wrap_zero_grad(original: Any) -> Any:
    """``original`` (an ``Optimizer.zero_grad``) with the policy's mode off the stack around
    it when the conditions of the module doc hold; otherwise ``original`` as it is."""

    @functools.wraps(original)
    def zero_grad(self: Any, set_to_none: bool = True) -> None:
        if _is_compiling() or type(self) not in QUIET:
            return original(self, set_to_none)
        mode = _owner() if _owner is not None else None
        n = _stack_len()
        if mode is None or n == 0 or _stack_at(n - 1) is not mode:
            return original(self, set_to_none)
        _pop()
        try:
            return original(self, set_to_none)
        finally:
            _push(mode)

    zero_grad.xrt_original = original  # type: ignore[attr-defined]
    return zero_grad


def install(owner: Any) -> None:
    """Registers the global step hooks and the ``zero_grad`` wrapper; ``owner()`` returns
    the policy's mode (None: none)."""
    global _owner, _zero_grad_installed
    _owner = owner
    if not _handles:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        _handles.append(register_optimizer_step_pre_hook(_pre_hook))
        _handles.append(register_optimizer_step_post_hook(_post_hook))
    if _zero_grad_installed is None or torch.optim.Optimizer.zero_grad is not _zero_grad_installed:
        _zero_grad_installed = _wrap_zero_grad(torch.optim.Optimizer.zero_grad)
        torch.optim.Optimizer.zero_grad = _zero_grad_installed


def resume() -> None:
    """Puts a suspended mode back on this thread's stack now (before a policy change)."""
    guard = _current() if _current is not None else None
    if guard is not None:
        guard.resume()


def uninstall() -> None:
    """Removes the hooks and the ``zero_grad`` wrapper (clear_kernel_policy: nothing stays
    registered; a ``zero_grad`` someone installed over ours is left to them)."""
    global _owner, _zero_grad_installed
    resume()
    for h in _handles:
        h.remove()
    _handles.clear()
    if _zero_grad_installed is not None and torch.optim.Optimizer.zero_grad is _zero_grad_installed:
        torch.optim.Optimizer.zero_grad = _zero_grad_installed.xrt_original
    _zero_grad_installed = None  # one someone wrapped stays in their chain, passing through
    _owner = None
