"""Helpers shared by the external-engine adapters (not public API).

Model sources, the ONNX dtype table, policy field access that works with the
pybind-wrapped policies or plain objects, and the Decision shapes adapters record:
one per policy mapping (``op="engine.policy"``) and one per node placement
(``op=<node op type>``, ``rule="engine.placement"``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..dispatch.decision import Candidate, Decision
from .base import TensorInfo

# ONNX TensorProto element type → canonical dtype name (dtype.h) and numpy dtype.
ONNX_DTYPES: dict[int, str] = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    16: "bfloat16",
}

# ORT's type strings ("tensor(float)") → canonical names.
ORT_TYPE_NAMES: dict[str, str] = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(bfloat16)": "bfloat16",
    "tensor(double)": "float64",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(int16)": "int16",
    "tensor(uint16)": "uint16",
    "tensor(int32)": "int32",
    "tensor(uint32)": "uint32",
    "tensor(int64)": "int64",
    "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
}


def numpy_dtype(name: str) -> np.dtype:
    """numpy dtype for a canonical dtype name (bfloat16 through ml_dtypes)."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


# ------------------------------------------------------------------ model sources
@dataclass
class ModelSource:
    """One ONNX model, whatever form it came in, with a content hash.

    ``path`` is kept when the model came from a file so vendors that resolve external
    data relative to the file can read it themselves.
    """

    proto: Any  # onnx.ModelProto
    path: Path | None = None
    _bytes: bytes | None = field(default=None, repr=False)
    _hash: str | None = field(default=None, repr=False)

    @property
    def bytes(self) -> bytes:
        """The serialized model with external data inlined."""
        if self._bytes is None:
            self._bytes = self.proto.SerializeToString()
        return self._bytes

    @property
    def sha256(self) -> str:
        """SHA-256 of the serialized model (what the engine caches are keyed on)."""
        if self._hash is None:
            self._hash = hashlib.sha256(self.bytes).hexdigest()
        return self._hash


def load_model(model: Any) -> ModelSource:
    """Accept an ``onnx.ModelProto``, serialized bytes or a path; raise InvalidModelError."""
    import onnx

    from .._core import InvalidModelError

    if isinstance(model, ModelSource):
        return model
    if isinstance(model, onnx.ModelProto):
        return ModelSource(model)
    if isinstance(model, (bytes, bytearray, memoryview)):
        try:
            proto = onnx.load_from_string(bytes(model))
        except Exception as exc:
            raise InvalidModelError(f"model bytes are not a valid ONNX ModelProto: {exc}") from exc
        return ModelSource(proto, _bytes=bytes(model))
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise InvalidModelError(
                f"model file {str(path)!r} does not exist (pass an .onnx path, bytes or a ModelProto)"
            )
        try:
            proto = onnx.load(str(path), load_external_data=True)
        except Exception as exc:
            raise InvalidModelError(f"cannot load ONNX model {str(path)!r}: {exc}") from exc
        return ModelSource(proto, path=path)
    raise InvalidModelError(
        f"model must be an onnx.ModelProto, bytes or a path to an .onnx file, got {type(model).__name__}"
    )


def onnx_io(proto: Any) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """Graph inputs (initializers excluded) and outputs as TensorInfo."""
    inits = {i.name for i in proto.graph.initializer}

    def info(vi: Any) -> TensorInfo:
        tt = vi.type.tensor_type
        dims: list[int | str | None] = []
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param"):
                dims.append(d.dim_param)
            else:
                dims.append(None)
        return TensorInfo(vi.name, tuple(dims), ONNX_DTYPES.get(tt.elem_type, f"onnx_type_{tt.elem_type}"))

    ins = [info(v) for v in proto.graph.input if v.name not in inits]
    outs = [info(v) for v in proto.graph.output]
    return ins, outs


def has_dynamic_dims(infos: Iterable[TensorInfo]) -> list[str]:
    """Names of inputs with a dimension that is not a fixed integer."""
    return [t.name for t in infos if any(not isinstance(d, int) or d < 0 for d in t.shape)]


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
