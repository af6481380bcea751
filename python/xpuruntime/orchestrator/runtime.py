"""A partitioned model: each island compiled by its engine, run in order, every
boundary crossing recorded (bytes, direction, time), saved as one artifact.

The artifact is a zip file: ``manifest.json`` (format, device, policies, model hash,
islands with their engine@device, values in and out and the SHA-256 of their file,
boundaries, placements) and one file per island, the island's own artifact: a native
``.xrtplan``, or the island's ONNX sub-model for the other engines. A loader checks
every hash and refuses a damaged or foreign artifact with ``InvalidModelError``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import threading
import time
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import _core
from .._core import InvalidArgumentError, InvalidModelError
from ..dispatch.decision import Candidate, Decision
from ..engines import registry
from ..engines.base import Availability, Engine, EngineOptions, TensorInfo
from ..runtime.profiler import enabled as _profiler_enabled
from ..runtime.profiler import record_range
from .graph import ModelGraph
from .partition import Partition, partition

ARTIFACT_FORMAT = "xpuruntime.partitioned"
ARTIFACT_VERSION = 1
_MANIFEST = "manifest.json"
_MISSING = object()


def island_policy(exec_policy: Any) -> Any:
    """The policy an island's engine gets: the session's, without the orchestrator's
    fields (engines, pins, budgets, forbid) and engine choice, targeting its device."""
    base = exec_policy.copy() if exec_policy is not None else _core.ExecutionPolicy()
    base.engines = []
    base.pins = {}
    base.max_islands = None
    base.max_fallback_nodes = None
    base.max_copy_bytes = None
    base.forbid = []
    base.engine = None
    base.allow_fallback = None
    base.target = "auto"
    return base


def is_artifact(model: Any) -> bool:
    """Whether ``model`` is a path to (or the bytes of) a partitioned artifact."""
    try:
        if isinstance(model, (bytes, bytearray, memoryview)):
            data = io.BytesIO(bytes(model))
            return zipfile.is_zipfile(data) and _MANIFEST in zipfile.ZipFile(data).namelist()
        if isinstance(model, (str, os.PathLike)) and Path(model).is_file() and zipfile.is_zipfile(model):
            with zipfile.ZipFile(model) as z:
                return _MANIFEST in z.namelist()
    except (OSError, zipfile.BadZipFile):
        return False
    return False


class _CopyStat:
    __slots__ = ("bytes", "count", "total_s", "zero_copy")

    def __init__(self) -> None:
        self.bytes = 0
        self.count = 0
        self.total_s = 0.0
        self.zero_copy = True


class PartitionedEngine(Engine):
    """One model run as islands on several engines and devices (see module docstring)."""

    name = "partitioned"

    @classmethod
    def availability(cls) -> Availability:
        return Availability(True, "", "", ("cpu", "cuda", "npu", "gpu"))

    def __init__(self, model: Any, options: EngineOptions, engines: Sequence[str] = ()) -> None:
        self._options = options
        self._kind = str(options.device).split(":")[0]
        self._lock = threading.Lock()
        self._island_policy = island_policy(options.exec_policy)
        if is_artifact(model):
            self._load(model)
            return
        engines = list(engines) or list(getattr(options.exec_policy, "engines", None) or [])
        if not engines:
            raise InvalidArgumentError("a partitioned session needs engines=[...] (at least one engine)")
        self._engines = [registry.canonical_name(e) for e in engines]
        graph = ModelGraph.load(model)
        dims = dict((options.extra or {}).get("dims", {}))
        self.partition: Partition = partition(
            graph, self._kind, self._engines, options.exec_policy, dims=dims, capability=_usable_here
        )
        self.partition.check()
        self._model_hash = graph.model_hash
        self._inputs_info = [_tensor_info(graph, v) for v in graph.inputs]
        self._outputs_info = [_tensor_info(graph, v) for v in graph.outputs]
        self._islands: list[tuple[Any, Engine, bytes]] = []
        for isl in self.partition.islands:
            sub = graph.submodel(isl.nodes, isl.inputs, isl.outputs, name=f"island{isl.index}")
            data = sub.SerializeToString()
            eng = self._build(isl, data)
            self._islands.append((isl, eng, data))
            _learn_types(graph, eng)
        self._outputs_info = [_tensor_info(graph, v) for v in graph.outputs]
        self._init_stats()

    # ------------------------------------------------------------------ building
    def _device_for(self, island: Any) -> str:
        # The session's device string (with its index) for islands on its kind.
        return str(self._options.device) if island.device == self._kind else island.device

    def _build(self, island: Any, model: Any) -> Engine:
        cls = registry.get_engine_class(island.engine)
        opts = EngineOptions(self._device_for(island), self._options.kernel_policy, self._island_policy, {})
        return cls(model, opts)

    def _init_stats(self) -> None:
        self._copies = {(b.value, b.dst): _CopyStat() for b in self.partition.boundaries}
        self._island_time = [0.0] * len(self._islands)
        self._runs = 0
        self._output_names = [o.name for o in self._outputs_info]
        self._output_set = frozenset(self._output_names)
        # What run() does per island, decided once: the values it reads (each with the
        # statistics of its boundary crossing, None for a model input or an island's
        # value that crosses no boundary), and the outputs it asks for.
        self._run_steps = [
            (
                isl.index,
                isl.place,
                eng,
                tuple((v, self._copies.get((v, isl.index))) for v in isl.inputs),
                list(isl.outputs),
            )
            for isl, eng, _ in self._islands
        ]

    # ------------------------------------------------------------------ Engine API
    def inputs(self) -> Sequence[TensorInfo]:
        return list(self._inputs_info)

    def outputs(self) -> Sequence[TensorInfo]:
        return list(self._outputs_info)

    def run(self, inputs: Mapping[str, Any], output_names: Sequence[str] | None = None) -> dict[str, Any]:
        # The per-run work is the islands' own; what the orchestrator adds per boundary is
        # one dictionary look-up, a contiguity check and two clock reads (issue 33: at most
        # 20 us per boundary, measured by tests/gpu/test_orchestrator_gpu.py).
        if output_names:
            names = list(output_names)
            for n in names:
                if n not in self._output_set:
                    raise InvalidArgumentError(
                        f"unknown output '{n}'; the model's outputs: {', '.join(sorted(self._output_set))}"
                    )
        else:
            names = self._output_names
        env: dict[str, Any] = dict(inputs)
        clock = time.perf_counter
        profiling = _profiler_enabled()
        times = [0.0] * len(self._run_steps)
        copies: list[tuple[Any, int, float, bool]] = []
        for k, (index, place, eng, reads, outs) in enumerate(self._run_steps):
            feeds = {}
            for v, stat in reads:
                src = env.get(v, _MISSING)
                if src is _MISSING:
                    raise InvalidArgumentError(f"input '{v}' is missing (island {index} reads it)")
                if stat is None:
                    feeds[v] = src
                else:
                    t0 = clock()
                    arr = np.ascontiguousarray(src)
                    copies.append((stat, arr.nbytes, clock() - t0, arr is src))
                    feeds[v] = arr
            t0 = clock()
            if profiling:
                with record_range(f"island{index} {place}"):  # in xpuruntime.profile() traces
                    env.update(eng.run(feeds, outs))
            else:
                env.update(eng.run(feeds, outs))
            times[k] = clock() - t0
        with self._lock:
            self._runs += 1
            for k, t in enumerate(times):
                self._island_time[k] += t
            for st, nbytes, dt, same in copies:
                st.bytes, st.count, st.total_s = nbytes, st.count + 1, st.total_s + dt
                st.zero_copy = st.zero_copy and same
        return {n: env[n] for n in names}

    # ------------------------------------------------------------------ explaining
    def copies(self) -> list[dict[str, Any]]:
        """Every boundary crossing: value, direction, bytes (measured after a run, else
        estimated), zero-copy, runs and mean time in microseconds."""
        out = []
        with self._lock:
            for b in self.partition.boundaries:
                st = self._copies[(b.value, b.dst)]
                out.append(
                    {
                        "value": b.value,
                        "from_island": b.src,
                        "to_island": b.dst,
                        "direction": b.direction,
                        "bytes": st.bytes if st.count else b.bytes,
                        "estimated": st.count == 0,
                        "zero_copy": st.zero_copy if st.count else None,
                        "runs": st.count,
                        "mean_us": (st.total_s / st.count * 1e6) if st.count else None,
                    }
                )
        return out

    def island_times_ms(self) -> list[float]:
        """Mean run time of each island so far (milliseconds; 0 before the first run)."""
        with self._lock:
            return [t / self._runs * 1e3 if self._runs else 0.0 for t in self._island_time]

    def decisions(self) -> list[Any]:
        dev = str(self._options.device)
        out: list[Any] = []
        for p in self.partition.placements:
            cands = [
                Candidate(c.place, "supported" if c.supported else "rejected", c.reason_code, c.detail)
                for c in p.candidates
            ]
            out.append(
                Decision(
                    op="engine.partition",
                    device=p.place.split("@")[1],
                    dtypes=[],
                    shapes=[],
                    candidates=cands,
                    chosen=p.place,
                    rule=p.rule,
                    node=p.node,
                    detail=f"{p.op} on {p.place}",
                )
            )
        times = self.island_times_ms()
        for isl, _, _ in self._islands:
            out.append(
                Decision(
                    op="engine.island",
                    device=isl.device,
                    dtypes=[],
                    shapes=[],
                    candidates=[Candidate(isl.place, "supported", "", "")],
                    chosen=isl.place,
                    rule="partition",
                    node=f"island{isl.index}",
                    detail=f"{len(isl.nodes)} node(s) {', '.join(isl.node_names[:6])}"
                    + (" ..." if len(isl.node_names) > 6 else "")
                    + f"; in: {', '.join(isl.inputs) or '-'}; out: {', '.join(isl.outputs) or '-'}"
                    + (f"; mean {times[isl.index]:.3f} ms per run" if self._runs else ""),
                )
            )
        for c in self.copies():
            size = "?" if c["bytes"] is None else str(c["bytes"])
            how = "estimated" if c["estimated"] else ("zero-copy" if c["zero_copy"] else "copied")
            when = f", mean {c['mean_us']:.1f} us over {c['runs']} run(s)" if c["runs"] else ""
            out.append(
                Decision(
                    op="engine.copy",
                    device=dev,
                    dtypes=[],
                    shapes=[],
                    candidates=[],
                    chosen=c["direction"],
                    rule="partition",
                    node=c["value"],
                    detail=f"{size} bytes {c['direction']} (island {c['from_island']} -> {c['to_island']}, {how}{when})",
                )
            )
        for isl, eng, _ in self._islands:
            out.extend(eng.decisions())
        return out

    def islands(self) -> list[tuple[Any, Engine]]:
        """(Island, its built engine) in run order (benchmarks time them one by one)."""
        return [(isl, eng) for isl, eng, _ in self._islands]

    @property
    def engine_names(self) -> list[str]:
        return list(dict.fromkeys(isl.engine for isl, _, _ in self._islands))

    # ------------------------------------------------------------------ save / load
    def save_plan(self, path: str | os.PathLike[str]) -> None:
        """Write the artifact (module docstring); InferenceSession.load_plan reads it."""
        files: list[tuple[str, bytes]] = []
        islands = []
        for isl, eng, data in self._islands:
            if isl.engine == "native" and getattr(eng, "plan", None) is not None:
                blob, name = bytes(eng.plan.serialize()), f"island{isl.index}.xrtplan"
            else:
                blob, name = data, f"island{isl.index}.onnx"
            files.append((name, blob))
            islands.append(
                {
                    "index": isl.index,
                    "place": isl.place,
                    "file": name,
                    "sha256": hashlib.sha256(blob).hexdigest(),
                    "nodes": list(isl.node_names),
                    "node_ids": list(isl.nodes),
                    "inputs": list(isl.inputs),
                    "outputs": list(isl.outputs),
                }
            )
        manifest = {
            "format": ARTIFACT_FORMAT,
            "version": ARTIFACT_VERSION,
            "device": self._kind,
            "model_hash": self._model_hash,
            "engines": self._engines,
            "exec_policy": None
            if self._options.exec_policy is None
            else json.loads(self._options.exec_policy.to_json()),
            "inputs": [_info_dict(i) for i in self._inputs_info],
            "outputs": [_info_dict(i) for i in self._outputs_info],
            "partition": self.partition.to_dict(),
            "islands": islands,
        }
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
            z.writestr(_MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
            for name, blob in files:
                z.writestr(name, blob)

    def _load(self, model: Any) -> None:
        src = io.BytesIO(bytes(model)) if isinstance(model, (bytes, bytearray, memoryview)) else model
        try:
            with zipfile.ZipFile(src) as z:
                manifest = json.loads(z.read(_MANIFEST))
                blobs = {i["file"]: z.read(i["file"]) for i in manifest["islands"]}
        except (KeyError, ValueError, TypeError, zipfile.BadZipFile, OSError) as exc:
            raise InvalidModelError(f"the partitioned artifact cannot be read: {exc}") from exc
        if manifest.get("format") != ARTIFACT_FORMAT or manifest.get("version") != ARTIFACT_VERSION:
            raise InvalidModelError(
                f"not a partitioned artifact of version {ARTIFACT_VERSION} (format {manifest.get('format')!r}, "
                f"version {manifest.get('version')!r}); save it again with this xpuruntime"
            )
        if manifest["device"] != self._kind:
            raise InvalidModelError(
                f"the artifact was partitioned for device '{manifest['device']}', this session runs on "
                f"'{self._kind}'; partition the model again for this device"
            )
        from .partition import Boundary, Island

        if self._options.exec_policy is None and manifest.get("exec_policy"):
            # No policy given: the islands were built under the saved one.
            saved = _core.ExecutionPolicy.from_json(json.dumps(manifest["exec_policy"]))
            self._island_policy = island_policy(saved)
        self._engines = list(manifest["engines"])
        self._model_hash = manifest["model_hash"]
        self._inputs_info = [_info_from(d) for d in manifest["inputs"]]
        self._outputs_info = [_info_from(d) for d in manifest["outputs"]]
        part = manifest["partition"]
        self.partition = Partition(
            part["device"],
            part["candidates"],
            [],
            [],
            [
                Boundary(b["value"], b["from"], b["to"], b["direction"], b["bytes"], b["dtype"], b["shape"])
                for b in part["boundaries"]
            ],
        )
        from .capability import NodeCapability
        from .partition import Placement

        self.partition.placements = [
            Placement(
                p["node"],
                p["op"],
                p["place"],
                p["rule"],
                [NodeCapability(p["node"], p["op"], p["place"], True, "", "loaded from the artifact")],
            )
            for p in part["placements"]
        ]
        self._islands = []
        for d in manifest["islands"]:
            blob = blobs[d["file"]]
            if hashlib.sha256(blob).hexdigest() != d["sha256"]:
                raise InvalidModelError(
                    f"island {d['index']} ({d['file']}) of the artifact is damaged (SHA-256 differs)"
                )
            isl = Island(d["index"], d["place"], d["node_ids"], d["nodes"], d["inputs"], d["outputs"])
            self.partition.islands.append(isl)
            self._islands.append((isl, self._build(isl, blob), blob))
        self._init_stats()


def _usable_here(graph: ModelGraph, engine: str, device: str) -> list[Any]:
    """Capability for a session built now: an engine that cannot run on ``device`` on this
    machine (no GPU, no such provider) takes no node there; the dry run, by contrast,
    answers for a device that is not here."""
    from .capability import NodeCapability, engine_capability

    av = registry.availability(engine)
    if av.available and device not in av.devices:
        why = f"{engine} cannot run on {device} here" + (f": {av.reason}" if av.reason else "")
        return [
            NodeCapability(n.name, n.op, f"{engine}@{device}", False, _core.reason.BACKEND_UNAVAILABLE, why)
            for n in graph.nodes
        ]
    return engine_capability(graph, engine, device)


def _learn_types(graph: ModelGraph, eng: Engine) -> None:
    """Types no shape inference knew, from the engine that built the values (the next
    islands declare them as typed inputs)."""
    from ..engines.onnx_model import ONNX_DTYPES
    from .graph import ValueInfo

    codes = {name: code for code, name in ONNX_DTYPES.items()}
    for info in eng.outputs():
        v = graph.values.get(info.name)
        if (v is None or v.elem_type == 0) and info.dtype in codes:
            shape = [d if isinstance(d, (int, str)) else None for d in info.shape]
            graph.values[info.name] = ValueInfo(codes[info.dtype], shape)


def _tensor_info(graph: ModelGraph, name: str) -> TensorInfo:
    from ..engines.onnx_model import ONNX_DTYPES

    v = graph.values.get(name)
    shape = tuple(v.shape or []) if v else ()
    return TensorInfo(name, shape, ONNX_DTYPES.get(v.elem_type, "float32") if v else "float32")


def _info_dict(i: TensorInfo) -> dict[str, Any]:
    return {"name": i.name, "shape": list(i.shape), "dtype": i.dtype}


def _info_from(d: dict[str, Any]) -> TensorInfo:
    return TensorInfo(d["name"], tuple(d["shape"]), d["dtype"])
