"""The dry run: before anything is built, the coverage matrix (per node, which engines
and kernels could run it, and why not), the partition the policy would produce, the
estimated bytes crossing each island boundary, and the budgets it would break."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._core import PolicyError, UnsupportedOperationError
from ..engines import registry
from .capability import NodeCapability, engine_capability, parse_place
from .graph import ModelGraph
from .partition import candidate_places, partition


def preview(
    model: Any,
    engines: Sequence[str],
    device: str = "cpu",
    exec_policy: Any = None,
    *,
    dims: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Coverage, partition and budgets of ``model`` as plain data (no engine builds).

    ``result["partition"]`` is None and ``result["error"]`` says why when no partition
    exists (a node nobody runs, a forbidden placement, a pin that cannot hold);
    ``result["violations"]`` lists the budgets the partition breaks.
    """
    engines = [registry.canonical_name(e) for e in engines]
    kind = device.split(":")[0]
    graph = ModelGraph.load(model)
    places = candidate_places(kind, engines, exec_policy)
    for pin in dict(getattr(exec_policy, "pins", None) or {}).values():
        e, d = parse_place(pin)
        places.append(f"{registry.canonical_name(e)}@{d or kind}")
    places = list(dict.fromkeys(places))
    cover: dict[str, list[NodeCapability]] = {p: engine_capability(graph, *_split(p)) for p in places}

    def cached(g: ModelGraph, engine: str, dev: str) -> list[NodeCapability]:
        return cover[f"{engine}@{dev}"]

    result: dict[str, Any] = {
        "model_hash": graph.model_hash,
        "device": kind,
        "engines": engines,
        "places": places,
        "coverage": [
            {"node": n.name, "op": n.op, "engines": {p: cover[p][n.index].to_dict() for p in places}}
            for n in graph.nodes
        ],
        "partition": None,
        "violations": [],
        "error": None,
    }
    try:
        part = partition(graph, kind, engines, exec_policy, dims=dims, capability=cached)
    except (UnsupportedOperationError, PolicyError) as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        return result
    result["partition"] = part.to_dict()
    result["violations"] = list(part.violations)
    return result


def _split(place: str) -> tuple[str, str]:
    e, d = parse_place(place)
    return e, str(d)


def coverage_summary(result: Mapping[str, Any]) -> dict[str, Any]:
    """Per op type: node count and, per engine@device, how many nodes it takes and the
    reason codes of the rest (a form stable across exports that rename nodes)."""
    ops: dict[str, dict[str, Any]] = {}
    for row in result["coverage"]:
        entry = ops.setdefault(row["op"], {"nodes": 0, "engines": {}})
        entry["nodes"] += 1
        for place, ans in row["engines"].items():
            e = entry["engines"].setdefault(place, {"supported": 0, "reasons": []})
            if ans["supported"]:
                e["supported"] += 1
            elif ans["reason_code"] not in e["reasons"]:
                e["reasons"].append(ans["reason_code"])
    part = result.get("partition")
    return {
        "device": result["device"],
        "places": list(result["places"]),
        "ops": {k: ops[k] for k in sorted(ops)},
        "islands": None
        if part is None
        else [{"place": i["place"], "nodes": len(i["nodes"])} for i in part["islands"]],
        "error": None if result.get("error") is None else result["error"].split(":")[0],
    }


def format_text(result: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The preview as (title, columns, rows) tables: coverage, islands, boundaries, budgets."""
    places = list(result["places"])
    cov_rows = []
    for row in result["coverage"]:
        cells = []
        for p in places:
            a = row["engines"][p]
            if a["supported"]:
                k = a["kernels"]
                cells.append("yes" + (f" ({', '.join(k[:2])}{', ...' if len(k) > 2 else ''})" if k else ""))
            else:
                cells.append(f"no: {a['reason_code']}")
        cov_rows.append([row["node"], row["op"], *cells])
    tables = []
    if places:
        tables.append(
            (
                "coverage (per node: which engines could run it, and why not)",
                ["node", "op", *places],
                cov_rows,
            )
        )
    part = result.get("partition")
    if part is not None:
        tables.append(
            (
                "partition",
                ["island", "engine@device", "nodes", "inputs", "outputs"],
                [
                    [
                        str(i["index"]),
                        i["place"],
                        _short(i["nodes"]),
                        _short(i["inputs"]),
                        _short(i["outputs"]),
                    ]
                    for i in part["islands"]
                ],
            )
        )
        tables.append(
            (
                "island boundaries (estimated bytes per run)",
                ["value", "from", "to", "direction", "dtype", "shape", "bytes"],
                [
                    [
                        b["value"],
                        str(b["from"]),
                        str(b["to"]),
                        b["direction"],
                        b["dtype"],
                        str(b["shape"]),
                        "?" if b["bytes"] is None else str(b["bytes"]),
                    ]
                    for b in part["boundaries"]
                ],
            )
        )
    status = result.get("error") or ("; ".join(result["violations"]) if result["violations"] else "ok")
    tables.append(("budgets", ["result"], [[status]]))
    return tables


def _short(items: Sequence[str], n: int = 4) -> str:
    return ", ".join(items[:n]) + (f" (+{len(items) - n})" if len(items) > n else "") if items else "-"
