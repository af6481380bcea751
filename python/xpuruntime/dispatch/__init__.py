"""Kernel dispatch: decisions, the decision log and explain helpers (DESIGN.md §4).

``decision`` holds plain dataclasses (no ``_core`` needed); ``explain`` drives the
C++ dispatcher.
"""

from .decision import REASON_CODES, RULES, Candidate, Decision, DecisionLog
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
