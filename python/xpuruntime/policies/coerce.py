"""One way to turn any policy argument into the C++ policy object (DESIGN.md §3).

Every API that takes a policy (sessions, engines, ``xpuruntime.ops``, PyTorch
routing, the dispatcher helpers) accepts the same forms and unwraps them here:

* ``None`` — no policy (the caller decides what that means);
* the core object (``_core.KernelPolicy`` / ``_core.ExecutionPolicy``);
* the Python wrapper (:class:`~xpuruntime.KernelPolicy` /
  :class:`~xpuruntime.ExecutionPolicy`);
* a mapping: the keyword arguments of the wrapper (``{"matmul": "cpu_blas",
  "mode": "require"}``, ``{"precision": "fp16"}``) or its JSON document (with
  ``"kind"`` or ``"schema_version"``), checked exactly as those keywords are;
* a path to a JSON (or YAML) policy file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .. import _core

__all__ = ["core_exec_policy", "core_kernel_policy", "policy_kind"]


def policy_kind(policy: Any) -> str | None:
    """``"kernel"`` or ``"execution"`` for a policy object (wrapper or core), else None."""
    inner = _inner(policy)
    if isinstance(inner, _core.KernelPolicy):
        return "kernel"
    if isinstance(inner, _core.ExecutionPolicy):
        return "execution"
    return None


def _inner(policy: Any) -> Any:
    get = getattr(policy, "_get_internal", None)
    return get() if callable(get) else policy


def _coerce(policy: Any, core_cls: Any, wrapper: Any, what: str) -> Any:
    if policy is None:
        return None
    inner = _inner(policy)
    if isinstance(inner, core_cls):
        return inner
    # Mappings and files go through the wrapper, so they are checked exactly as the
    # same values given as keyword arguments are (types, ranges, names, engines).
    if isinstance(policy, Mapping):
        return wrapper.from_mapping(policy)._get_internal()
    if isinstance(policy, (str, os.PathLike)):
        return wrapper.load(policy)._get_internal()
    raise _core.InvalidArgumentError(
        f"expected a {what} (the object, its core object, a dict or a path to a JSON/YAML policy "
        f"file), got {type(policy).__name__}; build one with xpuruntime.{what}(...)"
    )


def core_kernel_policy(policy: Any) -> Any:
    """The ``_core.KernelPolicy`` behind ``policy`` (None stays None).

    Raises:
        InvalidArgumentError: ``policy`` is none of the accepted forms.
        PolicyError: its content is invalid.
    """
    from .kernel_policy import KernelPolicy

    return _coerce(policy, _core.KernelPolicy, KernelPolicy, "KernelPolicy")


def core_exec_policy(policy: Any) -> Any:
    """The ``_core.ExecutionPolicy`` behind ``policy`` (None stays None).

    Raises:
        InvalidArgumentError: ``policy`` is none of the accepted forms.
        PolicyError: its content is invalid.
    """
    from .execution_policy import ExecutionPolicy

    return _coerce(policy, _core.ExecutionPolicy, ExecutionPolicy, "ExecutionPolicy")
