"""ONNX front end of the native engine (DESIGN.md §5, §12).

Loads a model (:func:`xpuruntime.engines.onnx_model.load_model`: a path with its
external data, bytes or an ``onnx.ModelProto``); checks it with the ONNX checker;
converts its default-domain opset into the window the kernels implement; runs ONNX shape inference; and describes the graph for
the C++ compiler (``_core.graph.compile``) with initializers as numpy arrays that
C++ reads in place (zero-copy). Every failure is a typed xpuruntime error that says
what is wrong with the model and how to proceed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import _core
from ..._core import InvalidModelError, UnsupportedOperationError, XpuRuntimeError
from ..onnx_model import ONNX_DTYPES, dims, import_onnx, load_model

#: Opsets of the default domain the kernels implement (older models are converted up).
OPSET_MIN = 13
OPSET_MAX = 28

#: ONNX element types the native engine runs (keys of ONNX_DTYPES; no unsigned 16/32/64).
NATIVE_ONNX_TYPES = frozenset((1, 2, 3, 5, 6, 7, 9, 10, 11, 16))


@dataclass
class LoadedModel:
    """A checked, converted, shape-inferred model and the hash of its original bytes."""

    proto: Any  # onnx.ModelProto
    model_hash: str  # SHA-256 of the model bytes as given
    source: str  # "path:<file>", "bytes" or "proto"
    opset: int  # default-domain opset after conversion
    original_opset: int


def load(model: Any) -> LoadedModel:
    """Load, check, convert and shape-infer ``model`` (path, bytes or ModelProto)."""
    src = load_model(model)
    try:
        return _prepare(src.proto, src.sha256, src.origin)
    except XpuRuntimeError:
        raise
    except Exception as exc:  # onnx raised something untyped on a malformed model
        raise InvalidModelError(f"the model is malformed: {type(exc).__name__}: {exc}") from exc


def _prepare(proto: Any, model_hash: str, source: str) -> LoadedModel:
    onnx = import_onnx()
    if not proto.HasField("graph") or len(proto.graph.output) == 0:
        raise InvalidModelError("the ONNX model has no graph or no graph outputs (corrupt model?)")
    _precheck(proto)
    original = _default_opset(proto)
    proto = _convert(proto, original)
    # The checker and shape inference serialize the whole model; on a copy without
    # the large weights they take milliseconds instead of seconds (GPT-2: 6 s), and
    # the weights themselves are validated when describe() reads them.
    light = _without_large_weights(proto)
    try:
        onnx.checker.check_model(light)
    except Exception as exc:
        msg = str(exc).strip().splitlines()
        raise InvalidModelError(f"the ONNX checker rejected the model: {' '.join(msg[:6])}") from exc
    try:
        onnx.shape_inference.infer_shapes(light, strict_mode=False)
    except Exception as exc:
        raise InvalidModelError(f"ONNX shape inference failed on the model: {exc}") from exc
    return LoadedModel(proto, model_hash, source, _default_opset(proto), original)


#: Initializers above this many bytes become typed graph inputs in the checked copy.
_LIGHT_LIMIT = 1 << 12


def _without_large_weights(proto: Any) -> Any:
    """A model sharing proto's structure whose large initializers are declared inputs."""
    onnx = import_onnx()
    from onnx import helper

    light = onnx.ModelProto()
    light.ir_version = proto.ir_version
    light.opset_import.extend(proto.opset_import)
    light.producer_name = proto.producer_name
    light.domain = proto.domain
    light.model_version = proto.model_version
    light.functions.extend(proto.functions)
    g, src = light.graph, proto.graph
    g.name = src.name
    g.node.extend(src.node)
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    g.sparse_initializer.extend(src.sparse_initializer)
    declared = {vi.name for vi in src.input}
    for t in src.initializer:
        size = (
            len(t.raw_data)
            + 4 * (len(t.float_data) + len(t.int32_data))
            + 8 * (len(t.int64_data) + len(t.double_data))
        )
        if size <= _LIGHT_LIMIT or t.data_location == onnx.TensorProto.EXTERNAL:
            g.initializer.append(t)
        elif t.name not in declared:
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return light


def _node_name(n: Any, i: int) -> str:
    return n.name or f"{n.op_type}_{i}"


def _precheck(proto: Any) -> None:
    """Errors the ONNX checker reports poorly: unknown ops, missing values, cycles."""
    from onnx import defs

    g = proto.graph
    for i, n in enumerate(g.node):
        try:
            known = defs.has(n.op_type)
        except (TypeError, ValueError):  # e.g. an op type that is not valid text
            known = False
        if n.domain in ("", "ai.onnx") and not known:
            raise UnsupportedOperationError(
                f"node '{_node_name(n, i)}' uses op '{n.op_type}', which is not an ONNX operator of the "
                "default domain (a custom op?); the native engine cannot run it"
            )
    available = {vi.name for vi in g.input} | {t.name for t in g.initializer} | {""}
    producer: dict[str, int] = {}
    for i, n in enumerate(g.node):
        for o in n.output:
            if not o:
                continue
            if o in producer or o in available - {""}:
                raise InvalidModelError(
                    f"value '{o}' is produced twice (node '{_node_name(n, i)}'); ONNX graphs are in SSA form"
                )
            producer[o] = i
    for i, n in enumerate(g.node):
        for v in n.input:
            if v not in available and v not in producer:
                raise InvalidModelError(
                    f"node '{_node_name(n, i)}' ({n.op_type}) reads '{v}', which is no graph input, "
                    "initializer or node output (a missing initializer?)"
                )
    for o in g.output:
        if o.name not in available and o.name not in producer:
            raise InvalidModelError(f"graph output '{o.name}' is not produced by any node")
    # Cycles: depth-first search over producer edges.
    state = [0] * len(g.node)  # 0 new, 1 on the stack, 2 done
    for start in range(len(g.node)):
        if state[start]:
            continue
        stack = [(start, iter(g.node[start].input))]
        state[start] = 1
        path = [start]
        while stack:
            k, it = stack[-1]
            nxt = next((producer[v] for v in it if v in producer), None)
            if nxt is None:
                state[k] = 2
                stack.pop()
                path.pop()
                continue
            if state[nxt] == 1:
                cyc = path[path.index(nxt) :] + [nxt]
                names = " -> ".join(f"'{_node_name(g.node[j], j)}'" for j in reversed(cyc))
                raise InvalidModelError(f"the graph has a cycle: {names}; ONNX graphs must be acyclic")
            if state[nxt] == 0:
                state[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(g.node[nxt].input)))


def _default_opset(proto: Any) -> int:
    for imp in proto.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    raise InvalidModelError("the model imports no default-domain (ai.onnx) opset")


def _convert(proto: Any, opset: int) -> Any:
    if OPSET_MIN <= opset <= OPSET_MAX:
        return proto
    onnx = import_onnx()
    target = OPSET_MIN if opset < OPSET_MIN else OPSET_MAX
    try:
        from onnx import version_converter

        return version_converter.convert_version(proto, target)
    except Exception as exc:
        raise UnsupportedOperationError(
            f"the model uses opset {opset}; the native engine implements opsets {OPSET_MIN}-{OPSET_MAX} "
            f"and onnx {onnx.__version__}'s version converter could not convert it to {target}: {exc}. "
            "Re-export the model at an opset in that window."
        ) from exc


def _dtype(value_info: Any, what: str) -> str:
    if not value_info.type.HasField("tensor_type"):
        raise UnsupportedOperationError(
            f"{what} '{value_info.name}' is not a tensor (sequences, maps and optionals are not supported)"
        )
    code = value_info.type.tensor_type.elem_type
    if code not in NATIVE_ONNX_TYPES:
        supported = sorted(ONNX_DTYPES[c] for c in NATIVE_ONNX_TYPES)
        raise UnsupportedOperationError(
            f"{what} '{value_info.name}' has ONNX element type {code}, which the native engine does not "
            f"support (supported: {', '.join(supported)})"
        )
    return ONNX_DTYPES[code]


def _tensor(t: Any, where: str) -> np.ndarray:
    from onnx import numpy_helper

    if t.data_type not in NATIVE_ONNX_TYPES or t.data_type == 16:
        raise UnsupportedOperationError(
            f"{where}: tensor '{t.name}' has ONNX element type {t.data_type}, which the native engine does "
            "not support as a constant"
        )
    try:
        arr = numpy_helper.to_array(t)
    except Exception as exc:
        raise InvalidModelError(f"{where}: tensor '{t.name}' cannot be read: {exc}") from exc
    # (np.ascontiguousarray would turn a 0-d tensor into a 1-d one)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def _attr(a: Any, where: str) -> Any:
    from onnx import AttributeProto, helper

    if a.type == AttributeProto.TENSOR:
        return _tensor(a.t, where)
    if a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
        raise UnsupportedOperationError(
            f"{where}: attribute '{a.name}' holds a subgraph; control flow (If/Loop/Scan) is not supported "
            "by the native engine"
        )
    if a.type in (
        AttributeProto.SPARSE_TENSOR,
        AttributeProto.SPARSE_TENSORS,
        AttributeProto.TENSORS,
        AttributeProto.TYPE_PROTO,
        AttributeProto.TYPE_PROTOS,
    ):
        raise UnsupportedOperationError(
            f"{where}: attribute '{a.name}' has a type the native engine does not support"
        )
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    if isinstance(v, list):
        return [x.decode("utf-8", errors="replace") if isinstance(x, bytes) else x for x in v]
    return v


def check_supported(desc: dict[str, Any], device: str) -> None:
    """Raise ``UnsupportedOperationError`` listing, at once, every op of the described
    graph the native engine cannot run on ``device`` (kind: ``"cpu"``, ``"cuda"``),
    with node counts and names; return when it can run them all.

    A model with symbolic input dimensions is compiled at its first run (one plan per
    input shape), so the session calls this at build time: the check is the one
    ``_core.graph.compile`` starts with (ops with no schema, from another domain, or
    without a kernel on the device; nodes computed only from constants fold and need
    none)."""
    _core.graph.check_supported(desc, device=device)


def describe(loaded: LoadedModel) -> dict[str, Any]:
    """The graph as plain Python data for ``_core.graph.compile`` (initializers zero-copy)."""
    try:
        return _describe(loaded)
    except XpuRuntimeError:
        raise
    except Exception as exc:  # a malformed proto field the checker let through
        raise InvalidModelError(f"cannot read the model graph: {type(exc).__name__}: {exc}") from exc


def _describe(loaded: LoadedModel) -> dict[str, Any]:
    g = loaded.proto.graph
    inits = [(t.name, _tensor(t, "initializer")) for t in g.initializer]
    init_names = {t.name for t in g.initializer}
    inputs = [(vi.name, _dtype(vi, "input"), dims(vi)) for vi in g.input if vi.name not in init_names]
    outputs = [
        (vi.name, _dtype(vi, "output") if vi.type.tensor_type.elem_type else "float32", dims(vi))
        for vi in g.output
    ]
    nodes = []
    for i, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{i}"
        where = f"node '{name}' ({n.op_type})"
        attrs = {a.name: _attr(a, where) for a in n.attribute}
        nodes.append(
            (name, n.op_type, n.domain if n.domain != "ai.onnx" else "", list(n.input), list(n.output), attrs)
        )
    return {"name": g.name, "inputs": inputs, "outputs": outputs, "initializers": inits, "nodes": nodes}
