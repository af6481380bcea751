"""Helpers shared by the engines (not public API).

Policy field access that works with the pybind-wrapped policies or plain objects,
the Decision shapes adapters record (models and dtypes: :mod:`.onnx_model`):
one per policy mapping (``op="engine.policy"``) and one per node placement
(``op=<node op type>``, ``rule="engine.placement"``), and the checks every engine's
inputs pass before an engine reads their memory (:func:`host_array`,
:func:`normalize_inputs`, :func:`normalize_output_names`, :func:`parse_input_shapes`).
"""

from __future__ import annotations

import hashlib
import operator
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._core import InvalidArgumentError
from ..dispatch.decision import Candidate, Decision


# ------------------------------------------------------------------------ inputs
def host_array(name: str, arr: np.ndarray) -> np.ndarray:
    """``arr`` as an array whose raw memory every engine reads correctly, or a typed error.

    Engines (ours, ONNX Runtime) read an input's bytes as little-endian values of its
    element type: a big-endian (``>f4``) array would be read as other numbers, a masked
    array would lose its mask, a structured array has no element type. So a byte order
    other than the machine's is converted (exactly: the same values, native bytes), an
    unaligned array is copied, and masked or structured arrays are refused with
    ``InvalidArgumentError`` naming the input. Arrays that need none of this are
    returned as they are (no copy).
    """
    # numpy.ma is imported lazily (about 1.4 MB): without it no masked array exists,
    # and touching np.ma here would import it on every process's first run.
    ma = sys.modules.get("numpy.ma")
    if ma is not None and isinstance(arr, ma.MaskedArray):
        raise InvalidArgumentError(
            f"input '{name}' is a numpy masked array: engines read its data and would ignore the "
            "mask; pass arr.filled(value) to fill the masked entries, or np.asarray(arr) to drop the "
            "mask on purpose"
        )
    dt = arr.dtype
    if dt.fields is not None or (dt.kind == "V" and dt.type is np.void):
        raise InvalidArgumentError(
            f"input '{name}' has the structured or raw-bytes dtype {dt!r}, which no engine reads as "
            "a tensor; pass one array per field (arr['field']) with a numeric dtype"
        )
    if not dt.isnative:
        # Same values in the machine's byte order (a >f4 array read as <f4 would be garbage).
        arr = arr.astype(dt.newbyteorder("="))
    if not arr.flags.aligned:
        arr = arr.copy()
    return arr


def normalize_inputs(inputs: Any) -> Any:
    """The input mapping with every numpy array passed through :func:`host_array`.

    Anything that is not a mapping is returned as is (the engine says what it expects);
    tensors that are not numpy arrays (DLPack, torch, ...) always hold native values."""
    if not isinstance(inputs, Mapping):
        return inputs
    return {k: host_array(str(k), v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}


def normalize_output_names(output_names: Any) -> list[str] | None:
    """``run``'s ``output_names`` as a list of names, or None for every output.

    As in ONNX Runtime (``InferenceSession.run([], feeds)``), None and an empty list
    both mean every output in the model's order; a single string is one name. Names
    must be strings (``InvalidArgumentError`` otherwise)."""
    if output_names is None:
        return None
    if isinstance(output_names, str):
        return [output_names]
    if isinstance(output_names, (bytes, Mapping)) or not isinstance(output_names, (Sequence, np.ndarray)):
        raise InvalidArgumentError(
            f"output_names must be a list of output names (or None for all), got {type(output_names).__name__}"
        )
    names = list(output_names)
    for n in names:
        if not isinstance(n, str):
            raise InvalidArgumentError(
                f"output_names must hold strings, got {type(n).__name__} {n!r}; pass the outputs' names"
            )
    return names or None


def parse_input_shapes(value: Any, inputs: Sequence[Any]) -> dict[str, list[int]]:
    """Validates the ``input_shapes`` engine option against the model's inputs.

    ``value``: None, or a mapping input name -> sequence of non-negative integers (Python
    or numpy integers; not bools, floats or strings). ``inputs``: the model's inputs
    (objects with ``name`` and ``shape``, symbolic dimensions as strings or None). Each
    shape must have the input's rank and agree with its fixed dimensions. Returns plain
    ``{name: [int, ...]}``; raises ``InvalidArgumentError`` saying which entry is wrong.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(
            f"input_shapes must be a dict of input name -> shape (a list of integers), got {type(value).__name__}"
        )
    declared = {str(i.name): tuple(i.shape) for i in inputs}

    def decl(shape: tuple[Any, ...]) -> str:
        return "[" + ", ".join(str(d) if isinstance(d, int) else "?" for d in shape) + "]"

    out: dict[str, list[int]] = {}
    for name, shape in value.items():
        if not isinstance(name, str) or name not in declared:
            raise InvalidArgumentError(
                f"input_shapes names {name!r}, which is not an input of the model; its inputs are: "
                + ", ".join(f"{n}{decl(s)}" for n, s in declared.items())
            )
        if isinstance(shape, (str, bytes, Mapping)) or not isinstance(shape, (Sequence, np.ndarray)):
            raise InvalidArgumentError(
                f"input_shapes[{name!r}] must be a list of integers, got {type(shape).__name__} {shape!r}"
            )
        dims: list[int] = []
        for k, d in enumerate(list(shape)):
            if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)):
                raise InvalidArgumentError(
                    f"input_shapes[{name!r}] dimension {k} is {type(d).__name__} {d!r}; dimensions must "
                    "be integers (int(...) a float only if it is whole)"
                )
            dims.append(operator.index(d))
            if dims[-1] < 0:
                raise InvalidArgumentError(
                    f"input_shapes[{name!r}] dimension {k} is {dims[-1]}; dimensions must be >= 0"
                )
        want = declared[name]
        if len(dims) != len(want):
            raise InvalidArgumentError(
                f"input_shapes[{name!r}] = {dims} has rank {len(dims)} but the model declares "
                f"{name}{decl(want)} (rank {len(want)})"
            )
        for k, (got, fixed) in enumerate(zip(dims, want)):
            if isinstance(fixed, int) and got != fixed:
                raise InvalidArgumentError(
                    f"input_shapes[{name!r}] = {dims} disagrees with the model's {name}{decl(want)} "
                    f"at dimension {k} ({got} != {fixed})"
                )
        out[name] = dims
    return out


# ---------------------------------------------------------------------- policies
def pol(policy: Any, name: str, default: Any = None) -> Any:
    """Field ``name`` of a policy (pybind or plain object), enums as lower-case strings."""
    if policy is None:
        return default
    value = getattr(policy, name, None)
    if value is None:
        return default
    if isinstance(value, (str, bool, int, float, list, tuple, dict)):
        return value
    enum_name = getattr(value, "name", None)  # pybind11 / Python enums
    if isinstance(enum_name, str):
        return enum_name.lower()
    return value


def precision(exec_policy: Any) -> str:
    """The policy's precision as "fp32" | "fp16" | "bf16" | "int8"."""
    p = str(pol(exec_policy, "precision", "fp32")).lower()
    return {"float32": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16"}.get(p, p)


def strict(exec_policy: Any, assertion: str) -> bool:
    """True when the policy carries the strict assertion (e.g. ``"no_cpu_fallback"``)."""
    if exec_policy is None:
        return False
    has = getattr(exec_policy, "has_strict", None)
    if callable(has):
        return bool(has(assertion))
    return assertion in (pol(exec_policy, "strict", []) or [])


def policy_fingerprint(policy: Any) -> str:
    """The policy's own fingerprint, or "none" when there is no policy."""
    if policy is None:
        return "none"
    fp = getattr(policy, "fingerprint", None)
    if callable(fp):
        return str(fp())
    if isinstance(fp, str):
        return fp
    return hashlib.sha256(repr(policy).encode()).hexdigest()


def kernel_prefs(kernel_policy: Any, op: str) -> list[str]:
    """Kernel names the KernelPolicy lists for ``op`` (empty when none)."""
    if kernel_policy is None:
        return []
    get = getattr(kernel_policy, "get", None)
    if callable(get):
        try:
            value = get(op)
        except Exception:  # noqa: BLE001 - a policy without the op has no preference
            value = None
    else:
        value = getattr(kernel_policy, op, None)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


# --------------------------------------------------------------------- decisions
class DecisionRecorder:
    """Collects an engine's decisions in order."""

    def __init__(self, engine: str, device: str) -> None:
        self.engine = engine
        self.device = device
        self.items: list[Decision] = []

    def mapping(
        self,
        field_name: str,
        value: Any,
        knob: str,
        knob_value: Any,
        *,
        detail: str = "",
        default: bool = False,
    ) -> None:
        """Record that policy field ``field_name=value`` became vendor ``knob=knob_value``."""
        chosen = f"{knob}={knob_value}"
        self.items.append(
            Decision(
                op="engine.policy",
                device=self.device,
                dtypes=[],
                shapes=[],
                candidates=[
                    Candidate(chosen, "supported", "", detail or f"{field_name}={value!r} → {chosen}")
                ],
                chosen=chosen,
                rule="default" if default else f"policy.{field_name}",
                node=f"{self.engine}:{field_name}",
                detail=detail or f"{field_name}={value!r} mapped to {self.engine} {chosen}",
            )
        )

    def placement(
        self, node: str, op_type: str, where: str, *, alternatives: Sequence[str] = (), detail: str = ""
    ) -> None:
        """Record where the vendor placed one node (provider, device or precision)."""
        cands = [Candidate(where, "supported", "", detail)]
        cands += [Candidate(a, "rejected", "not_chosen_by_engine", "") for a in alternatives if a != where]
        self.items.append(
            Decision(
                op=op_type,
                device=self.device,
                dtypes=[],
                shapes=[],
                candidates=cands,
                chosen=where,
                rule="engine.placement",
                node=node,
                detail=detail,
            )
        )

    def note(
        self, op: str, chosen: str, rule: str, detail: str, candidates: Sequence[Candidate] = ()
    ) -> None:
        """Record any other engine choice (a cache hit, a model conversion, ...)."""
        self.items.append(
            Decision(
                op=op,
                device=self.device,
                dtypes=[],
                shapes=[],
                candidates=list(candidates),
                chosen=chosen,
                rule=rule,
                detail=detail,
            )
        )
