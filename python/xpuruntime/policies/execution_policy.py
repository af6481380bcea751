"""ExecutionPolicy: target, precision, shapes and fallback for a whole model (seed 000 §9).

The C++ struct (``_core.ExecutionPolicy``) is the source of truth; this wrapper adds
keyword construction with checked values, validation on every change, and JSON/YAML.

Example::

    ExecutionPolicy(target="npu", precision="int8", static_shape=True, allow_fallback="cpu")
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .. import _core
from . import _checks, _io

__all__ = ["ExecutionPolicy"]

_TARGETS = ["auto", "cpu", "cuda", "npu"]
_PRECISIONS = ["bf16", "fp16", "fp32", "int8"]
_FIELDS = (
    "target",
    "precision",
    "static_shape",
    "allow_fallback",
    "deterministic",
    "cuda_graph",
    "workspace_limit_bytes",
    "engine",
    "allow_tf32",
    "keep_io_types",
    "threads",
    "strict",
    "engines",
    "pins",
    "max_islands",
    "max_fallback_nodes",
    "max_copy_bytes",
    "forbid",
)
# The orchestrator's budgets (None = no limit) and their smallest values.
_BUDGETS = {"max_islands": 1, "max_fallback_nodes": 0, "max_copy_bytes": 0}
_BOOL_FIELDS = ("static_shape", "deterministic", "cuda_graph", "allow_tf32", "keep_io_types")
# The C++ field widths: larger values would be truncated or refused by the binding.
_INT_LIMITS = {"workspace_limit_bytes": 2**63 - 1, "threads": 2**31 - 1}


def _error(msg: str) -> Exception:
    return _core.PolicyError(msg)


def _check_engine(name: str) -> str:
    """Canonical engine name; PolicyError with the valid names otherwise."""
    from ..engines import registry

    name = _checks.text(name, "ExecutionPolicy engine")
    try:
        return registry.canonical_name(name)
    except _core.InvalidArgumentError:
        choices = sorted(registry.list_engines())
        raise _error(_checks.unknown_choice("engine", name, "ExecutionPolicy", choices)) from None


def _names(value: Any, field: str) -> list[str]:
    """A list of names from a string or an iterable of strings (PolicyError otherwise)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Iterable) or isinstance(value, (bytes, bytearray, Mapping)):
        raise _error(f"ExecutionPolicy {field} must list names, got {_checks.describe(value)}")
    return [_checks.text(s, f"each ExecutionPolicy {field} entry") for s in value]


def _check_place(value: Any, what: str, allow_device: bool = False) -> str:
    """``engine`` or ``engine@device`` with a canonical engine name (a bare device kind
    too where ``allow_device``); PolicyError naming the valid forms otherwise."""
    from ..engines.registry import DEVICE_KINDS

    text = _checks.text(value, f"ExecutionPolicy {what}").strip().lower()
    if not text:
        raise _error(f"ExecutionPolicy {what} is empty; name an engine, 'engine@device' or a device kind")
    if allow_device and text in DEVICE_KINDS:
        return text
    engine, at, device = text.partition("@")
    if at and device.split(":")[0] not in DEVICE_KINDS:
        raise _error(
            f"ExecutionPolicy {what} '{text}' names device '{device}'; valid devices: "
            f"{', '.join(DEVICE_KINDS)} (form: 'engine@device', e.g. 'onnxruntime@cpu')"
        )
    return _check_engine(engine) + (f"@{device}" if at else "")


class ExecutionPolicy:
    """How a model runs: where, at which precision, with which shapes and fallback.

    Args:
        target: ``"cpu"``, ``"cuda"``, ``"npu"`` or ``"auto"``.
        precision: ``"fp32"``, ``"fp16"``, ``"bf16"`` or ``"int8"`` (aliases such as
            ``"float16"`` are accepted and stored canonically).
        static_shape: compile for fixed input shapes (NPUs and CUDA graphs need it).
        allow_fallback: a target to fall back to when ``target`` cannot run the model,
            or None (no fallback).
        deterministic: reject kernels that are not bitwise reproducible.
        cuda_graph: capture the plan once and replay it (static shapes).
        workspace_limit_bytes: largest kernel workspace allowed; 0 = no limit.
        engine: preferred engine (``"native"``, ``"onnxruntime"``, ...) or None.
        allow_tf32: let fp32 matmuls and convolutions use TF32 tensor cores.
        keep_io_types: with ``precision`` fp16/bf16, True (the default) keeps the model's
            float32 inputs and outputs (casts at the plan's edges); False gives them the
            precision's type too (feed and read fp16/bf16 arrays, as a model converted
            with ``keep_io_types=False``): no edge casts and half the output memory.
        threads: CPU threads; 0 = the library default.
        strict: assertions that turn a silent degradation into an error:
            ``"no_fallback"``, ``"no_cpu_fallback"``, ``"pinned_only"``.
        engines: engines in order of preference; a session partitions the model into
            islands, each node on the first engine that can take it
            (:mod:`xpuruntime.orchestrator`).
        pins: node name or op type -> ``"engine"`` or ``"engine@device"``.
        max_islands, max_fallback_nodes, max_copy_bytes: budgets asserted at build time
            (None = no limit): islands; nodes not on the first of ``engines``; bytes
            crossing island boundaries per run.
        forbid: device kinds (``"cpu"``), engines or ``"engine@device"`` no island may use.

    Raises:
        PolicyError: an unknown field or value (with the valid choices and the closest),
            or an inconsistent combination.
    """

    __hash__ = None  # mutable

    def __init__(
        self,
        target: str = "auto",
        precision: str = "fp32",
        static_shape: bool = False,
        allow_fallback: str | None = None,
        *,
        deterministic: bool = False,
        cuda_graph: bool = False,
        workspace_limit_bytes: int = 0,
        engine: str | None = None,
        allow_tf32: bool = False,
        keep_io_types: bool = True,
        threads: int = 0,
        strict: Iterable[str] = (),
        engines: Iterable[str] = (),
        pins: Mapping[str, str] | None = None,
        max_islands: int | None = None,
        max_fallback_nodes: int | None = None,
        max_copy_bytes: int | None = None,
        forbid: Iterable[str] = (),
        **unknown: Any,
    ) -> None:
        if unknown:
            name = min(unknown)
            raise _error(_checks.unknown_choice("field", name, "ExecutionPolicy", sorted(_FIELDS)))
        p = _core.ExecutionPolicy()
        self._policy = p
        values = {
            "target": target,
            "precision": precision,
            "static_shape": static_shape,
            "allow_fallback": allow_fallback,
            "deterministic": deterministic,
            "cuda_graph": cuda_graph,
            "workspace_limit_bytes": workspace_limit_bytes,
            "engine": engine,
            "allow_tf32": allow_tf32,
            "keep_io_types": keep_io_types,
            "threads": threads,
            "strict": strict,
            "engines": engines,
            "pins": pins,
            "max_islands": max_islands,
            "max_fallback_nodes": max_fallback_nodes,
            "max_copy_bytes": max_copy_bytes,
            "forbid": forbid,
        }
        for name, value in values.items():
            self._assign(p, name, value)
        p.validate()

    # ---- internal ------------------------------------------------------------
    @staticmethod
    def _assign(p: Any, name: str, value: Any) -> None:
        if name == "target":
            p.target = _checks.text(value, "ExecutionPolicy target")  # C++ parses aliases, lists choices
        elif name == "precision":
            p.precision = _checks.text(value, "ExecutionPolicy precision")
        elif name == "allow_fallback":
            if value is not None and not isinstance(value, str):
                raise _error(
                    f"ExecutionPolicy allow_fallback must be a target name or None, got {_checks.describe(value)}"
                )
            p.allow_fallback = (
                None if value is None else _checks.text(value, "ExecutionPolicy allow_fallback")
            )
        elif name in _BOOL_FIELDS:
            if not isinstance(value, bool):
                raise _error(f"ExecutionPolicy {name} must be True or False, got {_checks.describe(value)}")
            setattr(p, name, value)
        elif name in _INT_LIMITS:
            limit = _INT_LIMITS[name]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
                raise _error(
                    f"ExecutionPolicy {name} must be an integer >= 0 and <= {limit}, got {_checks.describe(value)}"
                )
            setattr(p, name, value)
        elif name == "engine":
            if value is None or value == "auto":
                p.engine = None
            elif isinstance(value, str):
                p.engine = _check_engine(value)
            else:
                raise _error(
                    f"ExecutionPolicy engine must be an engine name or None, got {_checks.describe(value)}"
                )
        elif name == "strict":
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, Iterable) or isinstance(value, (bytes, bytearray, Mapping)):
                raise _error(
                    f"ExecutionPolicy strict must list assertion names, got {_checks.describe(value)}"
                )
            items = [_checks.text(s, "each ExecutionPolicy strict assertion") for s in value]
            p.strict = sorted(set(items))  # a set: order never changes the fingerprint
        elif name in ("engines", "forbid"):
            items = _names(value, name)
            if name == "engines":
                p.engines = [_check_engine(e) for e in items]  # an order: kept as given
            else:
                p.forbid = sorted({_check_place(f, "forbid entry", allow_device=True) for f in items})
        elif name == "pins":
            if value is None:
                value = {}
            if not isinstance(value, Mapping):
                raise _error(
                    "ExecutionPolicy pins must map node names or op types to 'engine@device', got "
                    f"{_checks.describe(value)}"
                )
            p.pins = {
                _checks.text(k, "an ExecutionPolicy pins key"): _check_place(v, f"pins[{k!r}]")
                for k, v in value.items()
            }
        elif name in _BUDGETS:
            low = _BUDGETS[name]
            high = 2**31 - 1 if name == "max_islands" else 2**63 - 1
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high):
                raise _error(
                    f"ExecutionPolicy {name} must be None (no limit) or an integer >= {low}, "
                    f"got {_checks.describe(value)}"
                )
            setattr(p, name, value)
        else:
            raise _error(_checks.unknown_choice("field", name, "ExecutionPolicy", sorted(_FIELDS)))

    @classmethod
    def _wrap(cls, internal: Any) -> ExecutionPolicy:
        internal.validate()
        obj = cls.__new__(cls)
        obj._policy = internal
        return obj

    def _get_internal(self) -> Any:
        """The C++ policy (``_core.ExecutionPolicy``) this object wraps (internal use)."""
        return self._policy

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not attributes: fields, or a typo.
        if name.startswith("_"):
            raise AttributeError(name)
        if name in _FIELDS:
            value = getattr(self._policy, name)
            if name in ("strict", "engines", "forbid"):
                return list(value)
            return dict(value) if name == "pins" else value
        raise AttributeError(_checks.unknown_choice("field", name, "ExecutionPolicy", sorted(_FIELDS)))

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        candidate = self._policy.copy()
        self._assign(candidate, name, value)
        candidate.validate()
        self._policy = candidate

    def replace(self, **changes: Any) -> ExecutionPolicy:
        """A copy with some fields changed (validated)."""
        new = self.copy()
        candidate = new._policy
        for name, value in changes.items():
            self._assign(candidate, name, value)
        candidate.validate()
        return new

    def has_strict(self, assertion: str) -> bool:
        """True when the policy carries the strict assertion."""
        return bool(self._policy.has_strict(assertion))

    @property
    def schema_version(self) -> int:
        """Version of the file format this policy is written in."""
        return int(self._policy.schema_version)

    @property
    def fingerprint(self) -> str:
        """SHA-256 (hex) of the canonical JSON."""
        return self._policy.fingerprint

    def validate(self) -> None:
        """Checks the combination of values (PolicyError)."""
        self._policy.validate()

    def copy(self) -> ExecutionPolicy:
        """An independent copy."""
        return ExecutionPolicy._wrap(self._policy.copy())

    __copy__ = copy

    def __deepcopy__(self, memo: dict) -> ExecutionPolicy:
        return self.copy()

    # ---- serialization ---------------------------------------------------------
    def to_json(self, indent: int | None = 2) -> str:
        """JSON text; ``indent=None`` gives the canonical form."""
        return self._policy.to_json(-1 if indent is None else indent)

    def canonical_json(self) -> str:
        """The canonical JSON the fingerprint hashes."""
        return self._policy.canonical_json()

    @classmethod
    def from_json(cls, text: str | bytes) -> ExecutionPolicy:
        """Parses JSON text (refuses files from a newer schema version).

        Raises:
            PolicyError: the text is not a JSON object in UTF-8, or its content is invalid.
        """
        p = _core.ExecutionPolicy.from_json(_checks.json_bytes(text, "ExecutionPolicy JSON"))
        if p.engine is not None:
            p.engine = _check_engine(p.engine)
        p.strict = sorted(set(p.strict))
        # Engine names and placements canonical, as the keyword form stores them.
        cls._assign(p, "engines", list(p.engines))
        cls._assign(p, "forbid", list(p.forbid))
        cls._assign(p, "pins", dict(p.pins))
        return cls._wrap(p)

    def to_dict(self) -> dict[str, Any]:
        """The policy as a plain mapping (the JSON document)."""
        import json

        return json.loads(self.to_json())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExecutionPolicy:
        """Inverse of :meth:`to_dict`."""
        if not isinstance(data, Mapping):
            raise _error(f"ExecutionPolicy.from_dict takes a mapping, got {_checks.describe(data)}")
        return cls.from_json(_io.to_json(data, "ExecutionPolicy document"))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ExecutionPolicy:
        """A validated policy from either mapping form a caller may pass for a policy.

        The JSON document (it has ``"kind"`` or ``"schema_version"``) is read as by
        :meth:`from_dict`; any other mapping as keyword arguments, checked exactly as
        ``ExecutionPolicy(**data)`` checks them.
        """
        if not isinstance(data, Mapping):
            raise _error(f"an ExecutionPolicy mapping must be a mapping, got {_checks.describe(data)}")
        if "kind" in data or "schema_version" in data:
            return cls.from_dict(data)
        _checks.check_depth(data, "ExecutionPolicy mapping")
        for key in data:
            _checks.text(key, "an ExecutionPolicy field name")
        return cls(**dict(data))

    def save(self, path: str | Path, format: str | None = None) -> None:
        """Writes the policy; the format comes from the suffix (.json, .yaml, .yml)."""
        _io.write(path, self.to_json(), format)

    @classmethod
    def load(cls, path: str | Path, format: str | None = None) -> ExecutionPolicy:
        """Reads a policy written by :meth:`save` (or by hand)."""
        return cls.from_json(_io.read(path, format))

    # ---- comparison and display ------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if isinstance(other, ExecutionPolicy):
            return self.canonical_json() == other.canonical_json()
        if isinstance(other, _core.ExecutionPolicy):
            return self.canonical_json() == other.canonical_json()
        return NotImplemented

    def __repr__(self) -> str:
        return repr(self._policy)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(_FIELDS))
