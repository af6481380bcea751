"""The orchestrator (DESIGN.md §6): one model across engines and devices.

    sess = xrt.InferenceSession("model.onnx", device="cpu", engine=["native", "onnxruntime"])
    sess = xrt.InferenceSession("model.onnx", exec_policy=xrt.ExecutionPolicy(
        engines=["native", "onnxruntime"], pins={"Einsum": "onnxruntime@cpu"},
        max_islands=2, forbid=["cpu"]))
    print(sess.explain())                        # islands, placements, copies, kernels
    xrt.orchestrator.preview("m.onnx", ["native", "onnxruntime"], "cuda")  # no build

Pieces: :mod:`.capability` (each engine's per-node answer with reason codes),
:mod:`.partition` (placements, islands, boundaries, budgets), :mod:`.runtime` (the
partitioned engine, its copies and its saved artifact), :mod:`.preview` (the dry run
behind ``xpuruntime explain --engines ... --dry-run`` and ``xpuruntime policy check``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .capability import NodeCapability, engine_capability
from .graph import ModelGraph
from .partition import Boundary, Island, Partition, partition
from .preview import coverage_summary, preview
from .runtime import PartitionedEngine, is_artifact

__all__ = [
    "Boundary",
    "Island",
    "ModelGraph",
    "NodeCapability",
    "Partition",
    "PartitionedEngine",
    "build",
    "coverage_summary",
    "engine_capability",
    "is_artifact",
    "partition",
    "preview",
    "requested",
]


def requested(model: Any, engine: Any, exec_policy: Any) -> bool:
    """Whether a session asks for a partition: ``engine`` is a list, the policy lists
    ``engines`` (and names no single engine), or ``model`` is a partitioned artifact."""
    if isinstance(engine, (list, tuple)):
        return True
    if is_artifact(model):
        return True
    listed = list(getattr(exec_policy, "engines", None) or [])
    return bool(listed) and (engine is None or engine == "auto")


def build(
    model: Any, device: str | None, engine: Any, kernel_policy: Any, exec_policy: Any, extra: dict[str, Any]
) -> tuple[PartitionedEngine, str, list[Any]]:
    """The partitioned engine for a session, its device and the engine Decision."""
    from .._core import InvalidArgumentError
    from ..dispatch.decision import Candidate, Decision
    from ..engines.base import EngineOptions
    from ..engines.registry import canonical_name

    engines: Sequence[str] = (
        engine if isinstance(engine, (list, tuple)) else (getattr(exec_policy, "engines", None) or [])
    )
    if isinstance(engine, (list, tuple)) and not engine and not is_artifact(model):
        raise InvalidArgumentError(
            "engine=[] lists no engine; name at least one, e.g. ['native', 'onnxruntime']"
        )
    names = [canonical_name(e) for e in engines]
    dev = _device(model, device, exec_policy)
    eng = PartitionedEngine(model, EngineOptions(dev, kernel_policy, exec_policy, dict(extra)), names)
    used = eng.engine_names
    d = Decision(
        op="engine",
        device=dev,
        dtypes=[],
        shapes=[],
        candidates=[
            Candidate(p, "supported", "", "") for p in dict.fromkeys(i.place for i in eng.partition.islands)
        ],
        chosen="+".join(used),
        rule="partition",
        node="session",
        detail=f"{len(eng.partition.islands)} island(s) over {', '.join(used)} (engines in order: "
        f"{', '.join(names) or 'from the artifact'})",
    )
    return eng, dev, [d]


def _device(model: Any, device: str | None, exec_policy: Any) -> str:
    if is_artifact(model) and (device is None or device == "auto"):
        import io
        import json
        import os
        import zipfile

        src = model if isinstance(model, (str, os.PathLike)) else io.BytesIO(bytes(model))
        with zipfile.ZipFile(src) as z:
            return str(json.loads(z.read("manifest.json"))["device"])
    if device is None or device == "auto":
        target = str(getattr(exec_policy, "target", "auto") or "auto")
        if target != "auto":
            return target
        from ..engines.native import devices

        return "cuda" if "cuda" in devices() else "cpu"
    return str(device)
