"""Helpers shared by the external-engine adapters (not public API).

Policy field access that works with the pybind-wrapped policies or plain objects,
and the Decision shapes adapters record (models and dtypes: :mod:`.onnx_model`):
one per policy mapping (``op="engine.policy"``) and one per node placement
(``op=<node op type>``, ``rule="engine.placement"``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from ..dispatch.decision import Candidate, Decision


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
