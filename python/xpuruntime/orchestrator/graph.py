"""The model as the orchestrator sees it: nodes in graph order with stable names, the
dtype and shape of every value (ONNX shape inference), producers and consumers, and
sub-models cut out of it (one per island, or one per node for a capability probe)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._core import InvalidModelError
from ..engines.onnx_model import ONNX_DTYPES, import_onnx, load_model


@dataclass(frozen=True)
class NodeInfo:
    """One node: its index in the graph, its name (``op_type_i`` when unnamed, as the
    native engine names it), op type, domain, inputs and outputs."""

    index: int
    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def op(self) -> str:
        """The op type, qualified by its domain outside the default one."""
        return self.op_type if self.domain in ("", "ai.onnx") else f"{self.domain}.{self.op_type}"


@dataclass
class ValueInfo:
    """dtype code (ONNX TensorProto, 0 when unknown) and shape (int, symbolic str or
    None per dim; None when the rank is unknown) of one value."""

    elem_type: int = 0
    shape: list[int | str | None] | None = None

    def nbytes(self, dims: dict[str, int] | None = None) -> int | None:
        """Bytes of one tensor of this value; None when a dim or the dtype is unknown."""
        if self.shape is None or self.elem_type not in ONNX_DTYPES:
            return None
        n = 1
        for d in self.shape:
            if isinstance(d, str):
                d = (dims or {}).get(d)
            if not isinstance(d, int) or d < 0:
                return None
            n *= d
        name = ONNX_DTYPES[self.elem_type]
        return n * (2 if name == "bfloat16" else np.dtype(name).itemsize)


@dataclass
class ModelGraph:
    """A loaded model with shape-inferred value types; see module docstring."""

    proto: Any
    model_hash: str
    nodes: list[NodeInfo]
    values: dict[str, ValueInfo]
    inputs: list[str]  # graph inputs that are not initializers
    outputs: list[str]
    initializers: dict[str, Any]  # name -> TensorProto
    producer: dict[str, int] = field(default_factory=dict)  # value -> node index

    @classmethod
    def load(cls, model: Any) -> ModelGraph:
        """From a path, bytes or an ``onnx.ModelProto`` (InvalidModelError when malformed)."""
        src = load_model(model)
        proto = src.proto
        onnx = import_onnx()
        if not proto.HasField("graph"):
            raise InvalidModelError("the ONNX model has no graph (corrupt model?)")
        from ..engines.native.frontend import _without_large_weights

        light = _without_large_weights(proto)
        try:
            # On a copy without the large weights: milliseconds instead of seconds.
            inferred = onnx.shape_inference.infer_shapes(light, strict_mode=False)
        except Exception as exc:
            raise InvalidModelError(f"ONNX shape inference failed on the model: {exc}") from exc
        values: dict[str, ValueInfo] = {}
        for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
            values[vi.name] = _value_info(vi)
        inits = {t.name: t for t in proto.graph.initializer}
        for t in proto.graph.initializer:
            values[t.name] = ValueInfo(int(t.data_type), [int(d) for d in t.dims])
        untyped = [
            o for n in proto.graph.node for o in n.output if o and values.get(o, ValueInfo()).elem_type == 0
        ]
        if untyped:
            # Outputs of ops ONNX has no schema for (com.microsoft's), and what follows
            # them: ONNX Runtime knows its own ops.
            _ort_node_types(proto, values)
        names: list[str] = []
        seen: set[str] = set()
        for i, n in enumerate(proto.graph.node):
            # The native engine's name for an unnamed node; a repeated name made unique.
            name = n.name or f"{n.op_type}_{i}"
            names.append(name if name not in seen else f"{name}#{i}")
            seen.add(names[-1])
        nodes = [
            NodeInfo(
                i,
                names[i],
                n.op_type,
                n.domain if n.domain != "ai.onnx" else "",
                tuple(n.input),
                tuple(n.output),
            )
            for i, n in enumerate(proto.graph.node)
        ]
        producer = {o: n.index for n in nodes for o in n.outputs if o}
        return cls(
            proto=proto,
            model_hash=src.sha256,
            nodes=nodes,
            values=values,
            inputs=[vi.name for vi in proto.graph.input if vi.name not in inits],
            outputs=[vi.name for vi in proto.graph.output],
            initializers=inits,
            producer=producer,
        )

    def node(self, name: str) -> NodeInfo:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def consumers(self) -> dict[str, list[int]]:
        """value -> indices of the nodes that read it."""
        out: dict[str, list[int]] = {}
        for n in self.nodes:
            for v in n.inputs:
                if v:
                    out.setdefault(v, []).append(n.index)
        return out

    def topo_order(self) -> list[int]:
        """Node indices in a topological order (graph order where it already is one)."""
        done = set(self.inputs) | set(self.initializers) | {""}
        order: list[int] = []
        pending = list(range(len(self.nodes)))
        while pending:
            rest = []
            for i in pending:
                if all(v in done for v in self.nodes[i].inputs):
                    order.append(i)
                    done.update(self.nodes[i].outputs)
                else:
                    rest.append(i)
            if len(rest) == len(pending):
                names = ", ".join(f"'{self.nodes[i].name}'" for i in rest[:5])
                raise InvalidModelError(f"nodes {names} read values no node produces, or form a cycle")
            pending = rest
        return order

    # ------------------------------------------------------------------ sub-models
    def submodel(self, node_ids: list[int], inputs: list[str], outputs: list[str], *, name: str) -> Any:
        """An ONNX model of ``node_ids`` (in the given order) reading ``inputs`` (graph
        inputs of the sub-model) and the initializers it uses, producing ``outputs``."""
        onnx = import_onnx()
        from onnx import helper

        src = self.proto
        nodes = []
        for i in node_ids:
            n = onnx.NodeProto()
            n.CopyFrom(src.graph.node[i])
            n.name = self.nodes[i].name  # the names the whole model's explain() uses
            nodes.append(n)
        g = helper.make_graph(
            nodes,
            name,
            [self.value_info(v) for v in inputs],
            [self.value_info(v) for v in outputs],
        )
        used = {v for i in node_ids for v in self.nodes[i].inputs}
        g.initializer.extend(t for n, t in self.initializers.items() if n in used and n not in inputs)
        m = onnx.ModelProto()
        m.ir_version = src.ir_version
        m.opset_import.extend(src.opset_import)
        m.functions.extend(src.functions)
        m.producer_name = "xpuruntime.orchestrator"
        m.graph.CopyFrom(g)
        return m

    def value_info(self, name: str) -> Any:
        """A ValueInfoProto for ``name`` with its inferred dtype and shape (what is known)."""
        from onnx import helper

        v = self.values.get(name, ValueInfo())
        if v.elem_type == 0:
            vi = helper.make_empty_tensor_value_info(name)
            return vi
        shape = None if v.shape is None else [d if d is not None else None for d in v.shape]
        return helper.make_tensor_value_info(name, v.elem_type, shape)


def _ort_node_types(proto: Any, values: dict[str, ValueInfo]) -> None:
    """Where whole-model inference left values untyped (an op it does not know upstream
    of them), ask ONNX Runtime node by node, in graph order: a one-node session over
    typed inputs reports its outputs' types. Nodes it cannot build stay untyped."""
    try:
        import onnxruntime as ort
    except ImportError:
        return
    from onnx import helper

    from ..engines.onnx_model import ORT_TYPE_NAMES

    codes = {name: code for code, name in ONNX_DTYPES.items()}
    small = {t.name: t for t in proto.graph.initializer if t.ByteSize() <= 1 << 12}
    so = ort.SessionOptions()
    so.log_severity_level = 4
    for n in proto.graph.node:
        outs = [o for o in n.output if o and values.get(o, ValueInfo()).elem_type == 0]
        ins = [v for v in dict.fromkeys(n.input) if v]
        if not outs or any(values.get(v, ValueInfo()).elem_type == 0 for v in ins):
            continue
        inputs = [
            helper.make_tensor_value_info(v, values[v].elem_type, values[v].shape)
            for v in ins
            if v not in small
        ]
        g = helper.make_graph(
            [n],
            "types",
            inputs,
            [helper.make_empty_tensor_value_info(o) for o in n.output if o],
            [small[v] for v in ins if v in small],
        )
        m = helper.make_model(g, opset_imports=list(proto.opset_import), ir_version=proto.ir_version)
        try:
            sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        except Exception:  # noqa: BLE001, S112 - ORT cannot build it either: the outputs stay untyped
            continue
        for o in sess.get_outputs():
            code = codes.get(ORT_TYPE_NAMES.get(o.type, ""))
            if code is not None and values.get(o.name, ValueInfo()).elem_type == 0:
                shape = [d if isinstance(d, (int, str)) else None for d in (o.shape or [])]
                values[o.name] = ValueInfo(code, shape)


def _value_info(vi: Any) -> ValueInfo:
    if not vi.type.HasField("tensor_type"):
        return ValueInfo()
    t = vi.type.tensor_type
    shape: list[int | str | None] | None = None
    if t.HasField("shape"):
        shape = []
        for d in t.shape.dim:
            if d.HasField("dim_value"):
                shape.append(int(d.dim_value))
            elif d.HasField("dim_param"):
                shape.append(str(d.dim_param))
            else:
                shape.append(None)
    return ValueInfo(int(t.elem_type), shape)
