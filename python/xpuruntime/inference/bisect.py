"""First-divergence bisection: where do two runs of one model part ways?

    result = bisect(model, Side("fp32"), Side("fp16", exec_policy=ExecutionPolicy(precision="fp16")),
                    inputs, atol=1e-3, rtol=1e-3, max_memory=64 << 20)
    print(format_result(result))

Two *sides* (engines, policies or precisions) run the same inputs. Intermediates are
exposed as extra graph outputs in chunks, in topological order, each chunk holding at
most ``max_memory / 2`` bytes of intermediates per side (sizes from ONNX shape
inference on the actual input shapes; a tensor of unknown size goes alone into its
chunk), so a large model is never exposed all at once. The first node whose output
differs beyond ``|a - b| <= atol + rtol * |b|`` (or whose NaN/Inf pattern differs) is
reported with both sides' Decisions for it and the error figures of its inputs and
outputs. Exposing a tensor keeps it from being fused away, so each chunk's runs see
the model split where the chunk's tensors are.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._core import InvalidArgumentError

__all__ = ["BisectResult", "Side", "bisect", "exceeds", "format_result"]


@dataclass
class Side:
    """One way to run the model."""

    label: str
    engine: str = "native"
    device: str = "cpu"
    kernel_policy: Any = None
    exec_policy: Any = None


@dataclass
class BisectResult:
    """The first diverging node (``node`` empty when none diverged) and how it was found."""

    node: str = ""
    op_type: str = ""
    index: int = -1  # position in topological order
    outputs: dict[str, dict[str, float]] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)  # name -> metrics, or a note
    decisions: dict[str, list[Any]] = field(default_factory=dict)  # side label -> Decisions
    chunks: int = 0
    peak_exposed_bytes: int = 0  # most intermediate bytes one side held at once
    max_memory: int = 0
    nodes_checked: int = 0
    atol: float = 0.0
    rtol: float = 0.0
    skipped: list[str] = field(default_factory=list)  # tensors left out, with why


def exceeds(a: Any, b: Any, atol: float, rtol: float) -> bool:
    """True when ``a`` differs from ``b`` beyond ``atol + rtol * |b|`` anywhere (shapes,
    NaN and Inf positions must agree)."""
    from .metrics import within

    return not within(a, b, atol, rtol)


def _metrics(a: Any, b: Any) -> dict[str, float]:
    from .metrics import diff_metrics

    try:
        return diff_metrics(a, b)
    except ValueError:
        return {"max_abs": float("inf"), "max_rel": float("inf"), "cosine": 0.0}


_ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}


def _sizes(proto: Any, feeds: Mapping[str, np.ndarray]) -> dict[str, tuple[Any, int | None]]:
    """name -> (ValueInfoProto with its type, bytes or None when unknown)."""
    import onnx

    m = copy.deepcopy(proto)
    for vi in m.graph.input:
        if vi.name in feeds:
            dims = vi.type.tensor_type.shape.dim
            shape = feeds[vi.name].shape
            if len(dims) == len(shape):
                for d, n in zip(dims, shape):
                    d.ClearField("dim_param")
                    d.dim_value = int(n)
    try:
        m = onnx.shape_inference.infer_shapes(m, data_prop=True)
    except Exception:  # noqa: BLE001, S110 - without inferred sizes each tensor goes alone into its chunk
        m = copy.deepcopy(proto)
    out: dict[str, tuple[Any, int | None]] = {}
    for vi in list(m.graph.value_info) + list(m.graph.output):
        tt = vi.type.tensor_type
        size: int | None = _ITEMSIZE.get(tt.elem_type)
        if size is not None and tt.HasField("shape"):
            for d in tt.shape.dim:
                if d.HasField("dim_value"):
                    size *= int(d.dim_value)
                else:
                    size = None
                    break
        else:
            size = None
        out[vi.name] = (vi, size)
    return out


def _with_outputs(proto: Any, names: Sequence[str], infos: Mapping[str, tuple[Any, int | None]]) -> bytes:
    import onnx

    m = copy.deepcopy(proto)
    have = {o.name for o in m.graph.output}
    for n in names:
        if n in have:
            continue
        vi = infos.get(n, (None, None))[0]
        if vi is not None:
            new = copy.deepcopy(vi)
            tt = new.type.tensor_type
            if tt.HasField("shape"):  # rank kept, dimensions symbolic: any run-time shape fits
                for i, d in enumerate(tt.shape.dim):
                    d.Clear()
                    d.dim_param = f"{n}_d{i}"
            m.graph.output.append(new)
        else:
            m.graph.output.append(onnx.helper.make_empty_tensor_value_info(n))
    return m.SerializeToString()


def _run(
    side: Side, model_bytes: bytes, feeds: Mapping[str, np.ndarray], names: Sequence[str]
) -> tuple[dict[str, np.ndarray], list[Any]]:
    from .session import InferenceSession

    sess = InferenceSession(
        model_bytes,
        device=side.device,
        engine=side.engine,
        kernel_policy=side.kernel_policy,
        exec_policy=side.exec_policy,
    )
    out = sess.run(dict(feeds), list(names))
    return {k: np.asarray(v) for k, v in out.items()}, list(sess.decisions())


def bisect(
    model: Any,
    a: Side,
    b: Side,
    inputs: Mapping[str, np.ndarray],
    *,
    atol: float = 1e-4,
    rtol: float = 1e-3,
    max_memory: int = 256 << 20,
) -> BisectResult:
    """Find the first node (topological order) whose output differs between ``a`` and ``b``.

    Raises InvalidArgumentError for a memory cap that cannot hold one exposed tensor
    (the message names the tensor and its size).
    """
    from ..engines.onnx_model import load_model

    if max_memory <= 0:
        raise InvalidArgumentError(f"max_memory must be a positive number of bytes, got {max_memory}")
    proto = load_model(model).proto
    graph = proto.graph
    consts = {i.name for i in graph.initializer}
    graph_inputs = {i.name for i in graph.input}
    infos = _sizes(proto, inputs)
    budget = max_memory // 2  # both sides hold a chunk at once
    res = BisectResult(max_memory=max_memory, atol=atol, rtol=rtol)
    metrics: dict[str, dict[str, float]] = {}
    order = [(i, n) for i, n in enumerate(graph.node) if n.op_type != "Constant"]
    producer = {o: n for _, n in order for o in n.output if o}
    pos = 0
    while pos < len(order):
        chunk: list[tuple[int, Any]] = []
        names: list[str] = []
        used = 0
        while pos < len(order):
            idx, node = order[pos]
            outs = [o for o in node.output if o]
            sizes = [infos.get(o, (None, None))[1] for o in outs]
            unknown = any(s is None for s in sizes)
            need = sum(s or 0 for s in sizes)
            if chunk and (unknown or used + need > budget):
                break
            if not unknown and need > budget:
                raise InvalidArgumentError(
                    f"node {node.name or idx} ({node.op_type}) outputs {need} bytes, more than the "
                    "memory cap "
                    f"allows per side ({budget} of --max-memory {max_memory}); raise --max-memory"
                )
            chunk.append((idx, node))
            names += outs
            used += need
            pos += 1
            if unknown:
                break
        model_bytes = _with_outputs(proto, names, infos)
        out_a, dec_a = _run(a, model_bytes, inputs, names)
        out_b, dec_b = _run(b, model_bytes, inputs, names)
        exposed = sum(int(v.nbytes) for k, v in out_a.items() if k in names)
        if exposed > budget and len(chunk) > 1:
            raise InvalidArgumentError(
                f"the exposed intermediates took {exposed} bytes, over the cap per side ({budget}); shape "
                "inference underestimated them: raise --max-memory"
            )
        res.peak_exposed_bytes = max(res.peak_exposed_bytes, exposed)
        res.chunks += 1
        for idx, node in chunk:
            res.nodes_checked += 1
            bad = []
            for o in (o for o in node.output if o):
                if o not in out_a or o not in out_b:
                    res.skipped.append(f"{o}: not returned by both sides")
                    continue
                metrics[o] = _metrics(out_a[o], out_b[o])
                if exceeds(out_a[o], out_b[o], atol, rtol):
                    bad.append(o)
            if bad:
                res.node, res.op_type, res.index = node.name or f"#{idx}", node.op_type, idx
                res.outputs = {o: metrics[o] for o in node.output if o in metrics}
                for i in node.input:
                    if not i:
                        continue
                    if i in consts:
                        res.inputs[i] = "constant (identical on both sides)"
                    elif i in graph_inputs:
                        res.inputs[i] = "graph input (identical on both sides)"
                    elif i in metrics:
                        res.inputs[i] = metrics[i]
                    elif i in producer and producer[i].op_type == "Constant":
                        res.inputs[i] = "constant (identical on both sides)"
                    else:
                        res.inputs[i] = "not compared"
                key = node.name
                res.decisions = {
                    a.label: [d for d in dec_a if key and key in (d.node or "")],
                    b.label: [d for d in dec_b if key and key in (d.node or "")],
                }
                return res
        del out_a, out_b
    return res


def _fmt(m: Any) -> str:
    if isinstance(m, str):
        return m
    return f"max_abs {m['max_abs']:.3e}  max_rel {m['max_rel']:.3e}  cosine {m['cosine']:.6f}"


def format_result(res: BisectResult, a: str, b: str) -> str:
    """Plain text: the node, its inputs' and outputs' error figures, both sides' Decisions."""
    head = (
        f"bisect {a} vs {b}: tolerance |a-b| <= {res.atol:g} + {res.rtol:g}*|b|; "
        f"{res.nodes_checked} nodes checked "
        f"in {res.chunks} chunk(s), at most {res.peak_exposed_bytes} intermediate bytes per side "
        f"(cap {res.max_memory} for both)"
    )
    lines = [head]
    if not res.node:
        lines.append("no node differs beyond the tolerance")
        return "\n".join(lines)
    lines.append(f"first divergence: node {res.node} ({res.op_type}), #{res.index} in topological order")
    for name, m in res.inputs.items():
        lines.append(f"  input  {name}: {_fmt(m)}")
    for name, m in res.outputs.items():
        lines.append(f"  output {name}: {_fmt(m)}")
    for label, decs in res.decisions.items():
        lines.append(f"  decisions of {label}:")
        if not decs:
            lines.append("    (none recorded for this node)")
        for d in decs:
            lines.append(f"    {d.summary()}" + (f"  [{d.detail}]" if d.detail else ""))
    return "\n".join(lines)
