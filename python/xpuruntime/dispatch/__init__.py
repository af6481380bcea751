"""Kernel dispatch: decisions, the decision log and explain helpers (DESIGN.md §4)."""

from .decision import REASON_CODES, RULES, Candidate, Decision, DecisionLog

__all__ = ["REASON_CODES", "RULES", "Candidate", "Decision", "DecisionLog"]
