"""The process dispatcher from Python: select, dispatch, scoped policies, explain().

Every selection the C++ dispatcher makes is recorded; :func:`explain` returns the
recorded :class:`~xpuruntime.dispatch.decision.Decision` objects as a
:class:`~xpuruntime.dispatch.decision.DecisionLog` (``.to_table()`` for people,
``.to_json()`` for tools).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .. import _core
from . import log as _log
from .decision import Decision, DecisionLog

__all__ = [
    "Dispatcher",
    "OpContext",
    "clear_log",
    "dispatch",
    "explain",
    "export_pins",
    "get_policy",
    "policy_scope",
    "select",
    "set_policy",
]

Dispatcher = _core.Dispatcher
OpContext = _core.OpContext


def _dispatcher(dispatcher: Any) -> Any:
    return _core.Dispatcher.instance() if dispatcher is None else dispatcher


def set_policy(policy: Any, *, dispatcher: Any = None) -> None:
    """Sets the global KernelPolicy (None resets to the empty policy: all auto)."""
    _dispatcher(dispatcher).set_policy(policy)


def get_policy(*, dispatcher: Any = None) -> Any:
    """The global KernelPolicy as a :class:`xpuruntime.KernelPolicy`."""
    from ..policies import KernelPolicy

    return KernelPolicy._wrap(_dispatcher(dispatcher).get_policy(), validate=False)


@contextlib.contextmanager
def policy_scope(policy: Any, *, dispatcher: Any = None) -> Iterator[None]:
    """Overrides the global policy for the calling thread inside the ``with`` block.

    Other threads keep seeing the global policy; scopes nest.
    """
    handle = _dispatcher(dispatcher).push_scoped_policy(policy)
    owner = threading.get_ident()
    try:
        yield
    finally:
        if threading.get_ident() != owner:  # pragma: no cover - generators moved across threads
            raise RuntimeError("policy_scope must be closed on the thread that opened it")
        handle.close()


def select(
    op: str,
    inputs: Sequence[Any],
    outputs: Sequence[Any] = (),
    *,
    device: str = "cpu",
    capability: int = 0,
    node: str = "",
    attrs: Mapping[str, Any] | None = None,
    policy: Any = None,
    exec_policy: Any = None,
    dispatcher: Any = None,
) -> Decision:
    """Chooses a kernel for a described case without running it (recorded).

    ``inputs``/``outputs`` are ``(dtype, shape)`` or ``(dtype, shape, strides)`` tuples.
    Raises ``UnsupportedOperationError`` when nothing may run (the decision is still
    recorded).
    """
    ctx = _core.OpContext(
        op,
        list(inputs),
        list(outputs),
        device=device,
        capability=capability,
        node=node,
        attrs=dict(attrs or {}),
        exec_policy=exec_policy,
    )
    return _dispatcher(dispatcher).select(ctx, policy)


def dispatch(
    op: str,
    inputs: Sequence[Any],
    outputs: Sequence[Any] | None = None,
    *,
    node: str = "",
    attrs: Mapping[str, Any] | None = None,
    policy: Any = None,
    exec_policy: Any = None,
    dispatcher: Any = None,
) -> tuple[list[Any], Decision]:
    """Selects and runs a kernel on tensors (numpy arrays, xpuruntime Tensors, DLPack).

    C++ kernels write into ``outputs`` (preallocated, required for them); Python
    kernels may return new outputs instead. Returns ``(outputs, decision)``.
    """
    outs, decision = _dispatcher(dispatcher).dispatch(
        op,
        list(inputs),
        None if outputs is None else list(outputs),
        policy,
        exec_policy,
        dict(attrs or {}),
        node,
    )
    return list(outs), decision


def explain(last: int = 0, *, op: str | None = None, dispatcher: Any = None) -> DecisionLog:
    """The recorded decisions (oldest first; ``last`` > 0 keeps the newest ``last``)."""
    if dispatcher is None:
        _log.flush()  # hit counts that routed calls hold back reach the process log
    log = _dispatcher(dispatcher).explain(last)
    return log.filter(op=op) if op is not None else log


def clear_log(*, dispatcher: Any = None) -> None:
    """Forgets the recorded decisions."""
    if dispatcher is None:
        _log.flush()
    _dispatcher(dispatcher).clear_log()


def export_pins(base: Any = None, *, dispatcher: Any = None) -> Any:
    """The tuned winners as pins, added to ``base`` (default: the global policy).

    Save the result (``.save("pins.json")``) and load it in production to repeat the
    tuned choices exactly.
    """
    from ..policies import KernelPolicy

    return KernelPolicy._wrap(_dispatcher(dispatcher).export_pins(base), validate=False)
