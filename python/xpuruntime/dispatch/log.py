"""The process decision log (DESIGN.md §4), from anywhere in the package.

There is one log: the C++ Dispatcher's. Inference nodes, ``xpuruntime.ops`` calls,
Python kernels and routed PyTorch calls all record their Decisions there. This
module imports only ``_core`` and :mod:`.decision`, so any module may import it
without an import circle.

Hot paths that cache their choice per case (routed torch calls) count later calls
of a case in Python and hand the counts over through a flush hook before anyone
reads the log, so a cache hit costs no call into C++.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .. import _core
from .decision import Decision, DecisionLog

__all__ = ["add_flush_hook", "clear", "decisions", "dispatcher", "flush", "record"]

_hooks: list[Callable[[], None]] = []
_hooks_lock = threading.Lock()


def dispatcher() -> Any:
    """The process dispatcher (``_core.Dispatcher.instance()``), owner of the log."""
    return _core.Dispatcher.instance()


def add_flush_hook(hook: Callable[[], None]) -> None:
    """Registers ``hook()``, called before the log is read (it records pending hit counts)."""
    with _hooks_lock:
        if hook not in _hooks:
            _hooks.append(hook)


def flush() -> None:
    """Runs the flush hooks: pending hit counts reach the log."""
    with _hooks_lock:
        hooks = list(_hooks)
    for hook in hooks:
        hook()


def record(decision: Decision) -> int:
    """Appends a Decision made outside a ``select()`` to the log; returns its ``seq``."""
    return int(dispatcher().record(decision))


def decisions(last: int = 0) -> DecisionLog:
    """The recorded decisions, oldest first (the newest ``last`` when > 0)."""
    flush()
    return dispatcher().explain(last)


def clear() -> None:
    """Forgets every recorded decision (pending hit counts included)."""
    flush()
    dispatcher().clear_log()
