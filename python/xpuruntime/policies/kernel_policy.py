"""KernelPolicy: which kernel runs each op, written once as code (DESIGN.md §3).

The C++ struct (``_core.KernelPolicy``) is the source of truth; this wrapper adds the
seed's keyword API (seed 004 §6.3, seed 000 §8), validation on every change, and
JSON/YAML files.

Example::

    policy = KernelPolicy(matmul="cublasLt", attention=["flash_v2", "cudnn"], mode="require")
    policy.save("policy.json")
    assert KernelPolicy.load("policy.json") == policy
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import _core
from . import _io

__all__ = ["KernelNames", "KernelPolicy"]

#: A preference: one kernel name, or names in order of preference ("auto" = any).
KernelNames = str | Sequence[str]

_MODES = ("prefer", "require")
_STRATEGIES = ("best_performance", "first_supported")


def _names(op: str, kernel: Any) -> str | list[str]:
    if isinstance(kernel, str):
        return kernel
    if isinstance(kernel, Sequence) and all(isinstance(k, str) for k in kernel):
        return list(kernel)
    raise _core.PolicyError(f"kernel for op '{op}' must be a name or a list of names, got {kernel!r}")


def _choice(what: str, value: Any, choices: Sequence[str]) -> str:
    if isinstance(value, _core.AutoSelectStrategy):  # the seed's enum spelling
        value = "best_performance" if value == _core.AutoSelectStrategy.BestPerformance else "first_supported"
    if not isinstance(value, str) or value not in choices:
        raise _core.PolicyError(
            _core.policy_util.unknown_choice_message(what, str(value), "KernelPolicy", list(choices))
        )
    return value


class KernelPolicy:
    """Op -> kernel choices, plus how to choose (mode, auto strategy) and tuned pins.

    Args:
        preferences: optional mapping op -> kernel name or ordered list of names.
        mode: ``"prefer"`` (fall back and record why) or ``"require"`` (raise
            ``UnsupportedOperationError`` naming op, kernel and reason).
        auto_strategy: for ops without a choice or with ``"auto"``: ``"first_supported"``
            (highest-priority kernel that supports the case) or ``"best_performance"``
            (time the candidates once per case and keep the winner).
        pins: case key -> ``{"kernel": ..., "algorithm": ...}`` exact choices, as
            written by ``Dispatcher.export_pins()``.
        validate: check op keys and kernel names against the kernel registry (default).
        **kernels: ``op=kernel`` keywords, e.g. ``matmul="cublasLt"``.

    Raises:
        PolicyError: an unknown op key, kernel name or value; the message lists the
            valid choices and the closest one.
    """

    __hash__ = None  # mutable

    def __init__(
        self,
        preferences: Mapping[str, KernelNames] | None = None,
        *,
        mode: str = "prefer",
        auto_strategy: str = "first_supported",
        pins: Mapping[str, Any] | None = None,
        validate: bool = True,
        **kernels: KernelNames,
    ) -> None:
        p = _core.KernelPolicy()
        prefs = dict(preferences or {})
        prefs.update(kernels)
        for op, kernel in prefs.items():
            p.set(op, _names(op, kernel))
        p.mode = _choice("mode", mode, _MODES)
        p.auto_strategy_name = _choice("auto_strategy", auto_strategy, _STRATEGIES)
        if pins:
            p.pins = dict(pins)
        if validate:
            p.validate()
        self._policy = p
        self._validate = validate

    # ---- internal ------------------------------------------------------------
    @classmethod
    def _wrap(cls, internal: Any, validate: bool = True) -> KernelPolicy:
        if validate:
            internal.validate()
        obj = cls.__new__(cls)
        obj._policy = internal
        obj._validate = validate
        return obj

    def _change(self, fn: Any) -> KernelPolicy:
        # Change a copy, validate it, then commit: a rejected change leaves self intact.
        candidate = self._policy.copy()
        fn(candidate)
        if self._validate:
            candidate.validate()
        self._policy = candidate
        return self

    def _get_internal(self) -> Any:
        """The C++ policy (``_core.KernelPolicy``) this object wraps (internal use)."""
        return self._policy

    # ---- the seed's API --------------------------------------------------------
    def set(self, op_name: str, kernel_name: KernelNames) -> KernelPolicy:
        """Sets the kernel (or ordered kernels) for ``op_name``; returns self (chaining)."""
        names = _names(op_name, kernel_name)
        return self._change(lambda p: p.set(op_name, names))

    def get(self, op_name: str) -> str | list[str] | None:
        """The kernel (or list) chosen for ``op_name``, or None."""
        return self._policy.get(op_name)

    def remove(self, op_name: str) -> KernelPolicy:
        """Removes the choice for ``op_name`` (no error when absent); returns self."""
        return self._change(lambda p: p.remove(op_name))

    @property
    def preferences(self) -> dict[str, str | list[str]]:
        """All op -> kernel choices (a copy)."""
        return dict(self._policy.preferences)

    # ---- beyond the seed -------------------------------------------------------
    @property
    def mode(self) -> str:
        """``"prefer"`` or ``"require"``."""
        return self._policy.mode

    @mode.setter
    def mode(self, value: str) -> None:
        v = _choice("mode", value, _MODES)
        self._change(lambda p: setattr(p, "mode", v))

    @property
    def auto_strategy(self) -> str:
        """``"first_supported"`` or ``"best_performance"``."""
        return self._policy.auto_strategy_name

    @auto_strategy.setter
    def auto_strategy(self, value: str) -> None:
        v = _choice("auto_strategy", value, _STRATEGIES)
        self._change(lambda p: setattr(p, "auto_strategy_name", v))

    @property
    def pins(self) -> dict[str, dict[str, str]]:
        """Case key -> ``{"kernel", "algorithm"}`` (a copy)."""
        return dict(self._policy.pins)

    def set_pin(self, case_key: str, kernel: str, algorithm: str = "") -> KernelPolicy:
        """Pins one case (an ``OpContext.case_key()``) to a kernel and algorithm."""

        def apply(p: Any) -> None:
            pins = dict(p.pins)
            pins[case_key] = {"kernel": kernel, "algorithm": algorithm}
            p.pins = pins

        return self._change(apply)

    def clear_pins(self) -> KernelPolicy:
        """Removes every pin; returns self."""
        return self._change(lambda p: setattr(p, "pins", {}))

    @property
    def schema_version(self) -> int:
        """Version of the file format this policy is written in."""
        return int(self._policy.schema_version)

    @property
    def fingerprint(self) -> str:
        """SHA-256 (hex) of the canonical JSON: equal policies, equal fingerprints, anywhere."""
        return self._policy.fingerprint

    def validate(self) -> None:
        """Checks op keys, kernel names and pins against the kernel registry."""
        self._policy.validate()

    def copy(self) -> KernelPolicy:
        """An independent copy."""
        return KernelPolicy._wrap(self._policy.copy(), validate=False)

    __copy__ = copy

    def __deepcopy__(self, memo: dict) -> KernelPolicy:
        return self.copy()

    # ---- serialization ---------------------------------------------------------
    def to_json(self, indent: int | None = 2) -> str:
        """JSON text; ``indent=None`` gives the canonical form (sorted keys, no spaces)."""
        return self._policy.to_json(-1 if indent is None else indent)

    def canonical_json(self) -> str:
        """The canonical JSON the fingerprint hashes."""
        return self._policy.canonical_json()

    @classmethod
    def from_json(cls, text: str, *, validate: bool = True) -> KernelPolicy:
        """Parses JSON text (refuses files from a newer schema version)."""
        return cls._wrap(_core.KernelPolicy.from_json(text), validate)

    def to_dict(self) -> dict[str, Any]:
        """The policy as a plain mapping (the JSON document)."""
        import json

        return json.loads(self.to_json())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, validate: bool = True) -> KernelPolicy:
        """Inverse of :meth:`to_dict`."""
        import json

        return cls.from_json(json.dumps(dict(data)), validate=validate)

    def save(self, path: str | Path, format: str | None = None) -> None:
        """Writes the policy; the format comes from the suffix (.json, .yaml, .yml)."""
        _io.write(path, self.to_json(), format)

    @classmethod
    def load(cls, path: str | Path, format: str | None = None, *, validate: bool = True) -> KernelPolicy:
        """Reads a policy written by :meth:`save` (or by hand)."""
        return cls.from_json(_io.read(path, format), validate=validate)

    # ---- comparison and display ------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if isinstance(other, KernelPolicy):
            return self._policy == other._policy
        if isinstance(other, _core.KernelPolicy):
            return self._policy == other
        return NotImplemented

    def __repr__(self) -> str:
        return repr(self._policy)
