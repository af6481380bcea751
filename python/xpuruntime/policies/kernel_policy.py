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
from . import _checks, _io


def _validate(policy: Any) -> None:
    """Validates a ``_core.KernelPolicy`` once the device plugins are loaded: their kernels
    (cudnn, cublasLt, the CUDA op kernels) register their names when a plugin loads, and a
    policy or lock read in a fresh process may pin them before any session loaded one."""
    _core.DeviceManager.instance().get_device_count()
    policy.validate()


__all__ = ["KernelNames", "KernelPolicy"]

#: A preference: one kernel name, or names in order of preference ("auto" = any).
KernelNames = str | Sequence[str]

_MODES = ("prefer", "require")
_STRATEGIES = ("best_performance", "first_supported")


def _op(op: Any) -> str:
    return _checks.text(op, "a KernelPolicy op key")


def _names(op: str, kernel: Any) -> str | list[str]:
    what = f"the kernel for op {_checks.describe(op)}"
    if isinstance(kernel, str):
        return _checks.text(kernel, what)
    if isinstance(kernel, Sequence) and not isinstance(kernel, (bytes, bytearray)):
        return [_checks.text(k, what) for k in kernel]
    raise _core.PolicyError(f"{what} must be a name or a list of names, got {_checks.describe(kernel)}")


def _choice(what: str, value: Any, choices: Sequence[str]) -> str:
    if isinstance(value, _core.AutoSelectStrategy):  # the seed's enum spelling
        value = "best_performance" if value == _core.AutoSelectStrategy.BestPerformance else "first_supported"
    if not isinstance(value, str) or value not in choices:
        raise _core.PolicyError(_checks.unknown_choice(what, value, "KernelPolicy", choices))
    return value


def _mapping(value: Any, what: str) -> dict[Any, Any]:
    if not isinstance(value, Mapping):
        raise _core.PolicyError(f"KernelPolicy {what} must be a mapping, got {_checks.describe(value)}")
    _checks.check_depth(value, f"KernelPolicy {what}")
    return dict(value)


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
        if not isinstance(validate, bool):
            raise _core.PolicyError(
                f"KernelPolicy validate must be True or False, got {_checks.describe(validate)}"
            )
        p = _core.KernelPolicy()
        prefs = _mapping(preferences, "preferences") if preferences is not None else {}
        prefs.update(kernels)
        for op, kernel in prefs.items():
            p.set(_op(op), _names(op, kernel))
        p.mode = _choice("mode", mode, _MODES)
        p.auto_strategy_name = _choice("auto_strategy", auto_strategy, _STRATEGIES)
        if pins is not None:
            p.pins = _mapping(pins, "pins")
        if validate:
            _validate(p)
        self._policy = p
        self._validate = validate

    # ---- internal ------------------------------------------------------------
    @classmethod
    def _wrap(cls, internal: Any, validate: bool = True) -> KernelPolicy:
        if validate:
            _validate(internal)
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
        op = _op(op_name)
        names = _names(op, kernel_name)
        return self._change(lambda p: p.set(op, names))

    def get(self, op_name: str) -> str | list[str] | None:
        """The kernel (or list) chosen for ``op_name``, or None."""
        return self._policy.get(_op(op_name))

    def remove(self, op_name: str) -> KernelPolicy:
        """Removes the choice for ``op_name`` (no error when absent); returns self."""
        op = _op(op_name)
        return self._change(lambda p: p.remove(op))

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

        key = _checks.text(case_key, "a KernelPolicy pin key")
        entry = {
            "kernel": _checks.text(kernel, f"the kernel of pin {_checks.describe(key)}"),
            "algorithm": _checks.text(algorithm, f"the algorithm of pin {_checks.describe(key)}"),
        }

        def apply(p: Any) -> None:
            pins = dict(p.pins)
            pins[key] = entry
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
    def from_json(cls, text: str | bytes, *, validate: bool = True) -> KernelPolicy:
        """Parses JSON text (refuses files from a newer schema version).

        Raises:
            PolicyError: the text is not a JSON object in UTF-8, or its content is invalid.
        """
        return cls._wrap(
            _core.KernelPolicy.from_json(_checks.json_bytes(text, "KernelPolicy JSON")), validate
        )

    def to_dict(self) -> dict[str, Any]:
        """The policy as a plain mapping (the JSON document)."""
        import json

        return json.loads(self.to_json())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, validate: bool = True) -> KernelPolicy:
        """Inverse of :meth:`to_dict`."""
        return cls.from_json(
            _io.to_json(_mapping(data, "document"), "KernelPolicy document"), validate=validate
        )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> KernelPolicy:
        """A validated policy from either mapping form a caller may pass for a policy.

        The JSON document (it has ``"kind"`` or ``"schema_version"``) is read as by
        :meth:`from_dict`; any other mapping as keyword arguments, so
        ``{"matmul": "cpu_blas", "mode": "require"}`` means exactly
        ``KernelPolicy(matmul="cpu_blas", mode="require")``.
        """
        d = _mapping(data, "mapping")
        if "kind" in d or "schema_version" in d:
            return cls.from_dict(d)
        options = {k: d.pop(k) for k in ("mode", "auto_strategy", "pins") if k in d}
        prefs = _mapping(d.pop("preferences"), "preferences") if "preferences" in d else {}
        prefs.update(d)  # every other key is an op (including "validate": not an option here)
        return cls(prefs, **options)

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
