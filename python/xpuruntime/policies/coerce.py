"""One way to turn any policy argument into the C++ policy object (DESIGN.md §3).

Every API that takes a policy (sessions, engines, ``xpuruntime.ops``, PyTorch
routing, the dispatcher helpers) accepts the same forms and unwraps them here:

* ``None`` — no policy (the caller decides what that means);
* the core object (``_core.KernelPolicy`` / ``_core.ExecutionPolicy``);
* the Python wrapper (:class:`~xpuruntime.KernelPolicy` /
  :class:`~xpuruntime.ExecutionPolicy`);
* a mapping: for a KernelPolicy the wrapper's keyword arguments
  (``{"matmul": "cpu_blas", "mode": "require"}``, checked exactly as those keywords
  are) or its JSON document (with ``"kind"`` or ``"schema_version"``); for an
  ExecutionPolicy its JSON document (``{"precision": "fp16"}``);
* a path to a JSON (or YAML) policy file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .. import _core
from . import _io

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


def _coerce(policy: Any, core_cls: Any, from_mapping: Any, load: Any, what: str) -> Any:
    if policy is None:
        return None
    inner = _inner(policy)
    if isinstance(inner, core_cls):
        return inner
    if isinstance(policy, Mapping):
        return from_mapping(policy)
    if isinstance(policy, (str, os.PathLike)):
        return load(policy)
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

    # Through the wrapper: a mapping is checked exactly as the same keyword arguments.
    return _coerce(
        policy,
        _core.KernelPolicy,
        lambda d: KernelPolicy.from_mapping(d)._get_internal(),
        lambda path: KernelPolicy.load(path)._get_internal(),
        "KernelPolicy",
    )


def core_exec_policy(policy: Any) -> Any:
    """The ``_core.ExecutionPolicy`` behind ``policy`` (None stays None).

    Raises:
        InvalidArgumentError: ``policy`` is none of the accepted forms.
        PolicyError: its content is invalid.
    """

    # The C++ reader checks fields, types, ranges and combinations. Not through the
    # wrapper: it canonicalizes engine names with the engine registry, which imports
    # the engines, which import this module (an import circle); an unknown engine is
    # refused when the session selects its engine.
    def from_mapping(d: Mapping[str, Any]) -> Any:
        return _core.ExecutionPolicy.from_json(_io.to_json(d, "an ExecutionPolicy mapping"))

    return _coerce(
        policy,
        _core.ExecutionPolicy,
        from_mapping,
        lambda path: _core.ExecutionPolicy.from_json(_io.read(path, None)),
        "ExecutionPolicy",
    )
