"""Partitioning: each node to an engine@device by pins, policy order and capability;
islands (runs of nodes on one engine@device, in an order that keeps them few); the
values crossing each island boundary with their estimated bytes; and the budgets of
the ExecutionPolicy checked against the result.

Rules (DESIGN.md §3, §6):

- candidates, in order: each engine of ``engines`` on the session's device, then,
  when ``allow_fallback`` names another device ("cpu": "islands may run on the CPU"),
  each engine on that device;
- a pin (``pins={"node name or op type": "engine[@device]"}``; the node name wins)
  places its nodes there or fails naming why;
- ``forbid`` removes candidates (a device kind, an engine, or engine@device);
- ``max_islands``, ``max_fallback_nodes`` (nodes not on the first candidate) and
  ``max_copy_bytes`` (bytes crossing island boundaries per run, symbolic dims taken
  from ``dims`` or as 1) are asserted by :meth:`Partition.check`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._core import PolicyError, UnsupportedOperationError
from ..engines import registry
from .capability import NodeCapability, engine_capability, parse_place, place_name
from .graph import ModelGraph


@dataclass
class Placement:
    """Where one node runs, the rule that put it there, and every candidate's answer."""

    node: str
    op: str
    place: str
    rule: str  # "pinned" | "policy.prefer" | "fallback"
    candidates: list[NodeCapability]


@dataclass
class Island:
    """Consecutive nodes run by one engine on one device."""

    index: int
    place: str
    nodes: list[int]  # node indices in run order
    node_names: list[str]
    inputs: list[str]  # values it reads from graph inputs or earlier islands
    outputs: list[str]  # values later islands or the caller read

    @property
    def engine(self) -> str:
        return parse_place(self.place)[0]

    @property
    def device(self) -> str:
        return str(parse_place(self.place)[1])


@dataclass
class Boundary:
    """One value crossing from one island to another (an estimated copy per run)."""

    value: str
    src: int  # island index
    dst: int
    direction: str  # "native@cpu -> onnxruntime@cpu"
    bytes: int | None  # None when a dim is unknown
    dtype: str
    shape: list[Any]

    @property
    def cross_device(self) -> bool:
        a, b = self.direction.split(" -> ")
        return parse_place(a)[1] != parse_place(b)[1]


@dataclass
class Partition:
    """The whole answer: placements, islands, boundaries and budget violations."""

    device: str
    candidates: list[str]
    placements: list[Placement]
    islands: list[Island]
    boundaries: list[Boundary]
    violations: list[str] = field(default_factory=list)
    coverage: dict[str, list[NodeCapability]] = field(default_factory=dict)

    @property
    def fallback_nodes(self) -> list[str]:
        first = self.candidates[0] if self.candidates else ""
        return [p.node for p in self.placements if p.place != first]

    @property
    def copy_bytes(self) -> int:
        return sum(b.bytes or 0 for b in self.boundaries)

    def check(self) -> None:
        """Raise PolicyError naming every budget violation (and the nodes behind it)."""
        if self.violations:
            raise PolicyError(
                "the partition breaks the ExecutionPolicy's budgets: " + "; ".join(self.violations)
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "candidates": list(self.candidates),
            "islands": [
                {
                    "index": i.index,
                    "place": i.place,
                    "nodes": list(i.node_names),
                    "inputs": list(i.inputs),
                    "outputs": list(i.outputs),
                }
                for i in self.islands
            ],
            "boundaries": [
                {
                    "value": b.value,
                    "from": b.src,
                    "to": b.dst,
                    "direction": b.direction,
                    "bytes": b.bytes,
                    "dtype": b.dtype,
                    "shape": list(b.shape),
                }
                for b in self.boundaries
            ],
            "placements": [
                {"node": p.node, "op": p.op, "place": p.place, "rule": p.rule} for p in self.placements
            ],
            "fallback_nodes": self.fallback_nodes,
            "copy_bytes": self.copy_bytes,
            "violations": list(self.violations),
        }


def _field(policy: Any, name: str, default: Any) -> Any:
    value = getattr(policy, name, None) if policy is not None else None
    return default if value is None else value


def _canonical_place(text: str, device: str) -> str:
    engine, dev = parse_place(text)
    return place_name(registry.canonical_name(engine), dev or device)


def _forbidden(place: str, forbid: Sequence[str]) -> str:
    """The forbid entry that excludes ``place`` ("" when none does)."""
    engine, device = parse_place(place)
    for f in forbid:
        if f in (place, engine, device):
            return f
    return ""


def candidate_places(device: str, engines: Sequence[str], policy: Any) -> list[str]:
    """The ordered engine@device candidates of the rules above."""
    places = [place_name(registry.canonical_name(e), device) for e in engines]
    fallback = _field(policy, "allow_fallback", None)
    if fallback and fallback != device:
        places += [place_name(registry.canonical_name(e), fallback) for e in engines]
    return list(dict.fromkeys(places))


def partition(
    graph: ModelGraph,
    device: str,
    engines: Sequence[str],
    policy: Any = None,
    *,
    dims: Mapping[str, int] | None = None,
    capability: Any = engine_capability,
) -> Partition:
    """Place every node and cut islands; raise when a node has nowhere to go.

    Raises:
        UnsupportedOperationError: nodes no candidate engine can run (each candidate's
            reason named).
        PolicyError: nodes only a forbidden placement could run, or a pin that cannot hold.
    """
    device = device.split(":")[0]
    forbid = [str(f) for f in _field(policy, "forbid", [])]
    pins = {str(k): _canonical_place(str(v), device) for k, v in dict(_field(policy, "pins", {})).items()}
    cands = candidate_places(device, engines, policy)
    coverage: dict[str, list[NodeCapability]] = {}

    def cover(place: str) -> list[NodeCapability]:
        if place not in coverage:
            engine, dev = parse_place(place)
            coverage[place] = capability(graph, engine, str(dev))
        return coverage[place]

    placements: list[Placement] = []
    missing: list[str] = []
    forbidden_only: list[str] = []
    for n in graph.nodes:
        answers = [cover(c)[n.index] for c in cands]
        pin = pins.get(n.name) or pins.get(n.op_type) or pins.get(n.op)
        if pin is not None:
            ans = cover(pin)[n.index]
            why = _forbidden(pin, forbid)
            if why:
                raise PolicyError(
                    f"node '{n.name}' ({n.op}) is pinned to {pin}, which forbid={forbid} excludes "
                    f"(entry '{why}'); drop the pin or the forbid entry"
                )
            if not ans.supported:
                raise UnsupportedOperationError(
                    f"node '{n.name}' ({n.op}) is pinned to {pin}, which cannot run it: "
                    f"{ans.reason_code}: {ans.detail}"
                )
            placements.append(Placement(n.name, n.op, pin, "pinned", [ans, *answers]))
            continue
        chosen = None
        for c, ans in zip(cands, answers):
            if ans.supported and not _forbidden(c, forbid):
                chosen = c
                break
        if chosen is None:
            reasons = "; ".join(
                f"{c}: "
                + (
                    f"forbidden by forbid entry '{_forbidden(c, forbid)}'"
                    if a.supported and _forbidden(c, forbid)
                    else f"{a.reason_code} ({a.detail})"
                )
                for c, a in zip(cands, answers)
            )
            line = f"'{n.name}' ({n.op}): {reasons}"
            if any(a.supported for a in answers):
                forbidden_only.append(line)
            else:
                missing.append(line)
            continue
        rule = "policy.prefer" if chosen == cands[0] else "fallback"
        placements.append(Placement(n.name, n.op, chosen, rule, answers))
    if forbidden_only:
        raise PolicyError(
            f"{len(forbidden_only)} node(s) could run only where the ExecutionPolicy forbids "
            f"(forbid={forbid}): "
            + " | ".join(forbidden_only[:8])
            + (f" | and {len(forbidden_only) - 8} more" if len(forbidden_only) > 8 else "")
            + ". Allow that device or engine, or add an engine that runs these nodes elsewhere"
        )
    if missing:
        raise UnsupportedOperationError(
            f"{len(missing)} node(s) no candidate engine runs (candidates: {', '.join(cands)}): "
            + " | ".join(missing[:8])
            + (f" | and {len(missing) - 8} more" if len(missing) > 8 else "")
            + ". Add an engine that runs them (engines=[...]) or allow_fallback"
        )
    place_of = {graph.nodes[i].index: p.place for i, p in enumerate(placements)}
    islands = _islands(graph, place_of)
    boundaries = _boundaries(graph, islands, dims or {})
    part = Partition(device, cands, placements, islands, boundaries, coverage=coverage)
    part.violations = _violations(part, policy)
    return part


def _islands(graph: ModelGraph, place_of: dict[int, str]) -> list[Island]:
    """Topological order that stays on the current engine@device while it can (Kahn's
    algorithm; among ready nodes, the earliest in graph order)."""
    import heapq

    deps = [{graph.producer[v] for v in n.inputs if v in graph.producer} for n in graph.nodes]
    children: list[list[int]] = [[] for _ in graph.nodes]
    for i, d in enumerate(deps):
        for j in d:
            children[j].append(i)
    indeg = [len(d) for d in deps]
    by_place: dict[str, list[int]] = {}
    anywhere: list[int] = []

    def push(i: int) -> None:
        heapq.heappush(by_place.setdefault(place_of[i], []), i)
        heapq.heappush(anywhere, i)

    for i, d in enumerate(indeg):
        if d == 0:
            push(i)
    taken: set[int] = set()
    order: list[int] = []
    current = None
    while len(order) < len(graph.nodes):
        pick = None
        for heap in (by_place.get(current, []) if current else [], anywhere):
            while heap and heap[0] in taken:
                heapq.heappop(heap)
            if heap:
                pick = heapq.heappop(heap)
                break
        if pick is None:
            graph.topo_order()  # raises naming the nodes of the cycle
            raise AssertionError("no ready node")  # pragma: no cover - topo_order raised
        taken.add(pick)
        order.append(pick)
        current = place_of[pick]
        for c in children[pick]:
            indeg[c] -= 1
            if indeg[c] == 0:
                push(c)
    runs: list[list[int]] = []
    for i in order:
        if runs and place_of[runs[-1][0]] == place_of[i]:
            runs[-1].append(i)
        else:
            runs.append([i])
    consumers = graph.consumers()
    island_of = {i: k for k, run in enumerate(runs) for i in run}
    out = []
    for k, run in enumerate(runs):
        inside = {v for i in run for v in graph.nodes[i].outputs if v}
        ins = list(
            dict.fromkeys(
                v
                for i in run
                for v in graph.nodes[i].inputs
                if v and v not in inside and v not in graph.initializers
            )
        )
        outs = [
            v
            for v in dict.fromkeys(v for i in run for v in graph.nodes[i].outputs if v)
            if v in graph.outputs or any(island_of[c] != k for c in consumers.get(v, []))
        ]
        out.append(Island(k, place_of[run[0]], run, [graph.nodes[i].name for i in run], ins, outs))
    return out


def _boundaries(graph: ModelGraph, islands: list[Island], dims: Mapping[str, int]) -> list[Boundary]:
    from ..engines.onnx_model import ONNX_DTYPES

    src_of = {v: isl.index for isl in islands for v in isl.outputs}
    sized = {d: 1 for v in graph.values.values() for d in (v.shape or []) if isinstance(d, str)}
    sized.update(dims)
    out = []
    for isl in islands:
        for v in isl.inputs:
            if v not in src_of:
                continue  # a graph input: the caller's tensor
            info = graph.values.get(v)
            src = islands[src_of[v]]
            out.append(
                Boundary(
                    v,
                    src.index,
                    isl.index,
                    f"{src.place} -> {isl.place}",
                    info.nbytes(sized) if info else None,
                    ONNX_DTYPES.get(info.elem_type, "?") if info else "?",
                    list(info.shape or []) if info else [],
                )
            )
    return out


def _violations(part: Partition, policy: Any) -> list[str]:
    out = []
    max_islands = _field(policy, "max_islands", None)
    if max_islands is not None and len(part.islands) > max_islands:
        first = part.islands[0].place
        others = [n for isl in part.islands if isl.place != first for n in isl.node_names]
        out.append(
            f"{len(part.islands)} islands ("
            + ", ".join(f"{i.place}: {len(i.nodes)} node(s)" for i in part.islands)
            + f") exceed max_islands={max_islands}; the nodes that split the model: "
            + _names(others)
            + " (pin them, or raise max_islands)"
        )
    max_fb = _field(policy, "max_fallback_nodes", None)
    fb = part.fallback_nodes
    if max_fb is not None and len(fb) > max_fb:
        out.append(
            f"{len(fb)} node(s) fall back from {part.candidates[0]}, more than max_fallback_nodes={max_fb}: "
            + _names(fb)
        )
    has_strict = getattr(policy, "has_strict", None)
    if fb and callable(has_strict) and has_strict("no_fallback"):
        out.append(
            f"strict 'no_fallback': {len(fb)} node(s) fall back from {part.candidates[0]}: " + _names(fb)
        )
    max_copy = _field(policy, "max_copy_bytes", None)
    if max_copy is not None and part.copy_bytes > max_copy:
        out.append(
            f"{part.copy_bytes} bytes cross island boundaries per run, more than max_copy_bytes={max_copy}: "
            + ", ".join(f"'{b.value}' {b.bytes} B {b.direction}" for b in part.boundaries[:8])
        )
    return out


def _names(names: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(f"'{n}'" for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
