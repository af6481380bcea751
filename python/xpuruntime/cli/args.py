"""argparse value types and the policy flags shared by the CLI's commands (main, bench,
serve): one module below them all, so none imports another command's module."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not (value > 0 and np.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0 (a tolerance, a grace period)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not (value >= 0 and np.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


def port(text: str) -> int:
    """argparse type: a TCP port, 0 (any free port) or -1 (off)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, 0 or -1, got {text!r}") from None
    if not -1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 1..65535, 0 (any) or -1 (off), got {value}")
    return value


def dim_assignment(text: str) -> tuple[str, int]:
    """argparse type: NAME=VALUE with VALUE an integer >= 1."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip().isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(
            f"expected NAME=VALUE with an integer VALUE >= 1 (e.g. batch=2), got {text!r}"
        )
    return name.strip(), int(value)


def resolve_policies(args: argparse.Namespace) -> tuple[Any, Any]:
    """The KernelPolicy and ExecutionPolicy the flags give (files, then --threads/--precision)."""
    kp = ep = None
    if getattr(args, "policy", None):
        from ..policies import KernelPolicy

        kp = KernelPolicy.load(args.policy)
    if getattr(args, "exec_policy", None):
        from ..policies import ExecutionPolicy

        ep = ExecutionPolicy.load(args.exec_policy)
    for field in ("threads", "precision"):
        value = getattr(args, field, None)
        if value:
            from ..policies import ExecutionPolicy

            ep = ep or ExecutionPolicy()
            setattr(ep, field, value)
    return kp, ep
