"""``LockViolationError`` (DESIGN.md §10): a locked session would decide differently.

The class is declared in C++ (``error.h``, mapped in ``errors_binding.cpp``) like every
typed error; a core built before it existed gets the same class defined here, so the
Python API never depends on the build's age. Instances carry ``.diff``: one line per
field that changed, e.g. ``"node /conv1: kernel cpu_direct → cpu_im2col"``.
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import _core

__all__ = ["LockViolationError", "lock_violation"]

LockViolationError: type[_core.XpuRuntimeError] = getattr(_core, "LockViolationError", None) or type(
    "LockViolationError",
    (_core.XpuRuntimeError,),
    {
        "__doc__": "A locked session would decide differently from its lock file (see ``.diff``).",
        "__module__": "xpuruntime",
    },
)


def lock_violation(what: str, diff: Sequence[str], fix: str) -> _core.XpuRuntimeError:
    """A ``LockViolationError`` whose message lists ``diff`` and says how to fix it."""
    lines = list(diff)
    shown = lines[:20] + ([f"... and {len(lines) - 20} more"] if len(lines) > 20 else [])
    msg = f"{what}:\n  " + "\n  ".join(shown) + f"\n{fix}"
    err = LockViolationError(msg)
    err.diff = lines
    return err
