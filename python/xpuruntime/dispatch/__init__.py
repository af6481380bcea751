"""Kernel dispatch: decisions, the decision log and explain helpers (DESIGN.md §4).

``decision`` holds plain dataclasses (no ``_core`` needed); ``explain`` drives the
C++ dispatcher; ``log`` is the process decision log, importable from anywhere.
"""

from typing import Any

from .decision import Candidate, Decision, DecisionLog
from .explain import (
    Dispatcher,
    OpContext,
    clear_log,
    dispatch,
    explain,
    export_pins,
    get_policy,
    policy_scope,
    select,
    set_policy,
)

__all__ = [
    "REASON_CODES",
    "RULES",
    "Candidate",
    "Decision",
    "DecisionLog",
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


def __getattr__(name: str) -> Any:
    if name in ("RULES", "REASON_CODES"):  # declared in C++: read on first use
        from . import decision

        return getattr(decision, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
