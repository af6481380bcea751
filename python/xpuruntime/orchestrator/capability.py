"""Capability: which nodes of a model each engine can take on a device, and why not
for the others (DESIGN.md §6, ORT's GetCapability contract).

Every engine answers per node with a :class:`NodeCapability` (a reason code from
``_core.REASON_CODES`` when it cannot):

- ``native``: the C++ registry, node by node (``_core.graph.node_support``): the check
  ``compile`` starts with, with no kernel preparation and no device, so ``cuda`` is
  answered on a machine without a GPU wherever the CUDA plugin is built;
- ``onnxruntime``: ONNX Runtime's own node assignment, asked once per distinct node
  signature (op, domain, opset, input dtypes and ranks, attributes, constant inputs)
  with a one-node model and CPU fallback disabled, so a node counts only where the
  named execution provider takes it; answers are cached in the process;
- ``openvino``: ``Core().query_model`` on the same one-node models;
- ``tensorrt``: the ONNX parser's ``supports_model`` where TensorRT is installed;
- ``qnn``: ONNX Runtime's QNN execution provider where it is installed.

An engine that is not installed answers ``backend_unavailable`` for every node, with
its install hint.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import _core
from ..engines import registry
from ..engines.onnx_model import import_onnx
from .graph import ModelGraph

__all__ = ["NodeCapability", "engine_capability", "parse_place", "place_name"]

# Constant inputs at most this large go into a probe model as initializers (ops such
# as Reshape or Resize are assigned differently when their parameters are known).
_CONST_LIMIT = 1 << 12


@dataclass(frozen=True)
class NodeCapability:
    """One engine's answer for one node on one device."""

    node: str
    op: str
    place: str  # "engine@device"
    supported: bool
    reason_code: str = ""
    detail: str = ""
    kernels: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "place": self.place,
            "supported": self.supported,
            "reason_code": self.reason_code,
            "detail": self.detail,
            "kernels": list(self.kernels),
        }


def place_name(engine: str, device: str) -> str:
    return f"{engine}@{device}"


def parse_place(place: str) -> tuple[str, str | None]:
    engine, at, device = place.partition("@")
    return engine, (device if at else None)


def engine_capability(graph: ModelGraph, engine: str, device: str) -> list[NodeCapability]:
    """Per node of ``graph`` (graph order): can ``engine`` run it on ``device`` (a kind)?"""
    engine = registry.canonical_name(engine)
    place = place_name(engine, device)
    av = registry.availability(engine)
    if not av.available:
        hint = f" (install: {av.install_hint})" if av.install_hint else ""
        return _all(
            graph,
            place,
            False,
            _core.reason.BACKEND_UNAVAILABLE,
            f"{engine} is not installed here: {av.reason}{hint}",
        )
    fn = _ENGINES.get(engine)
    if fn is None:
        return _all(
            graph,
            place,
            False,
            _core.reason.BACKEND_UNAVAILABLE,
            f"engine {engine!r} does not answer capability queries (no probe registered)",
        )
    return fn(graph, device, place)


def _all(graph: ModelGraph, place: str, ok: bool, code: str, detail: str) -> list[NodeCapability]:
    return [NodeCapability(n.name, n.op, place, ok, code, detail) for n in graph.nodes]


# ---------------------------------------------------------------------------- native
def _native(graph: ModelGraph, device: str, place: str) -> list[NodeCapability]:
    from ..engines.native.frontend import NATIVE_ONNX_TYPES

    if device not in ("cpu", "cuda"):
        return _all(
            graph,
            place,
            False,
            _core.reason.DEVICE_MISMATCH,
            f"the native engine runs on cpu and cuda, not on {device!r}",
        )
    desc, refused = _native_desc(graph)
    try:
        rows = _core.graph.node_support(desc, device=device)
    except _core.XpuRuntimeError as exc:
        return _all(graph, place, False, _core.reason.BACKEND_UNAVAILABLE, str(exc))
    by_name = {r["node"]: r for r in rows}
    out = []
    for n in graph.nodes:
        r = by_name[n.name]
        bad = [
            v
            for v in (*n.inputs, *n.outputs)
            if v
            and graph.values.get(v) is not None
            and graph.values[v].elem_type not in (0, *NATIVE_ONNX_TYPES)
        ]
        if r["supported"] and bad:
            out.append(
                NodeCapability(
                    n.name,
                    n.op,
                    place,
                    False,
                    _core.reason.DTYPE_UNSUPPORTED,
                    f"value '{bad[0]}' has an element type the native engine does not run",
                )
            )
        elif n.name in refused:
            out.append(
                NodeCapability(
                    n.name, n.op, place, False, _core.reason.ATTRIBUTE_UNSUPPORTED, refused[n.name]
                )
            )
        else:
            out.append(
                NodeCapability(
                    n.name,
                    n.op,
                    place,
                    bool(r["supported"]),
                    r["reason_code"],
                    r["detail"],
                    tuple(r["kernels"]),
                )
            )
    return out


def _native_desc(graph: ModelGraph) -> tuple[dict[str, Any], dict[str, str]]:
    """The graph for ``_core.graph.node_support``: as the front end describes it, but
    tolerant (a node whose attributes the engine cannot take is answered 'no' rather
    than failing the whole model; constants of other types become typed inputs)."""
    from ..engines.native import frontend
    from ..engines.onnx_model import ONNX_DTYPES

    refused: dict[str, str] = {}
    inits = []
    inputs = []
    for name, t in graph.initializers.items():
        try:
            inits.append((name, frontend._tensor(t, "initializer")))
        except _core.XpuRuntimeError:
            inputs.append((name, "float32", [int(d) for d in t.dims]))

    def shape(name: str) -> list[int | str | None]:
        v = graph.values.get(name)
        return [d if isinstance(d, (int, str)) else None for d in (v.shape or [])] if v else []

    for name in graph.inputs:
        v = graph.values.get(name)
        dtype = ONNX_DTYPES.get(v.elem_type, "float32") if v else "float32"
        inputs.append(
            (
                name,
                dtype if dtype in {ONNX_DTYPES[c] for c in frontend.NATIVE_ONNX_TYPES} else "float32",
                shape(name),
            )
        )
    nodes = []
    for n, proto in zip(graph.nodes, graph.proto.graph.node):
        attrs = {}
        for a in proto.attribute:
            try:
                attrs[a.name] = frontend._attr(a, f"node '{n.name}' ({n.op_type})")
            except _core.XpuRuntimeError as exc:
                refused[n.name] = str(exc)
        nodes.append((n.name, n.op_type, n.domain, list(n.inputs), list(n.outputs), attrs))
    outputs = [(o, "float32", shape(o)) for o in graph.outputs]
    desc = {"name": "capability", "inputs": inputs, "outputs": outputs, "initializers": inits, "nodes": nodes}
    return desc, refused


# ----------------------------------------------------------------- one-node probes
_probe_lock = threading.Lock()
_probe_cache: dict[tuple[str, str, str], tuple[bool, str, str]] = {}


@dataclass
class _Probe:
    key: str
    model: bytes = field(repr=False)


def _probes(graph: ModelGraph) -> list[_Probe]:
    """One single-node model per node, keyed by its signature (nodes alike share one)."""
    from onnx import helper

    onnx = import_onnx()
    consts = _constant_outputs(graph)
    out = []
    for n, proto in zip(graph.nodes, graph.proto.graph.node):
        inputs, inits, sig = [], [], []
        for v in n.inputs:
            if not v:
                continue
            t = graph.initializers.get(v, consts.get(v))
            info = graph.values.get(v)
            if t is not None and t.ByteSize() <= _CONST_LIMIT:
                inits.append(t)
                sig.append(hashlib.sha256(t.SerializeToString()).hexdigest())
            elif v not in {i.name for i in inputs}:
                inputs.append(graph.value_info(v))
                sig.append(
                    f"{info.elem_type if info else 0}/{len(info.shape) if info and info.shape is not None else '?'}"
                )
        node = onnx.NodeProto()
        node.CopyFrom(proto)
        node.name = "probe"
        g = helper.make_graph([node], "probe", inputs, [graph.value_info(o) for o in n.outputs if o], inits)
        m = onnx.ModelProto()
        m.ir_version = graph.proto.ir_version
        m.opset_import.extend(graph.proto.opset_import)
        m.functions.extend(graph.proto.functions)
        m.graph.CopyFrom(g)
        opsets = ",".join(f"{o.domain}:{o.version}" for o in graph.proto.opset_import)
        attrs = hashlib.sha256(b"".join(a.SerializeToString() for a in proto.attribute)).hexdigest()
        key = f"{n.domain}.{n.op_type}|{opsets}|{';'.join(sig)}|{attrs}|{len(n.outputs)}"
        out.append(_Probe(key, m.SerializeToString()))
    return out


def _probe_all(graph: ModelGraph, place: str, ask: Any) -> list[NodeCapability]:
    """Ask ``ask(model_bytes) -> (ok, reason_code, detail)`` once per new signature."""
    out = []
    for n, p in zip(graph.nodes, _probes(graph)):
        key = (place, p.key, "")
        with _probe_lock:
            hit = _probe_cache.get(key)
        if hit is None:
            hit = ask(p.model)
            with _probe_lock:
                _probe_cache[key] = hit
        ok, code, detail = hit
        out.append(NodeCapability(n.name, n.op, place, ok, code, detail))
    return out


def _constant_outputs(graph: ModelGraph) -> dict[str, Any]:
    """Outputs of Constant nodes as tensors: a probe holds them as initializers, as the
    engine sees them in the whole model (an Unsqueeze's axes, a Reshape's shape)."""
    from onnx import helper, numpy_helper

    out = {}
    for n in graph.proto.graph.node:
        if n.op_type != "Constant" or n.domain not in ("", "ai.onnx") or len(n.attribute) != 1:
            continue
        a = n.attribute[0]
        try:
            if a.name == "value":
                t = type(a.t)()
                t.CopyFrom(a.t)
            elif a.name in ("value_int", "value_ints", "value_float", "value_floats"):
                dtype = np.int64 if "int" in a.name else np.float32
                t = numpy_helper.from_array(np.asarray(helper.get_attribute_value(a), dtype=dtype))
            else:
                continue
        except (ValueError, TypeError):
            continue
        t.name = n.output[0]
        out[n.output[0]] = t
    return out


def _first_line(exc: BaseException) -> str:
    """The informative line of a vendor's multi-line error (the last non-empty one)."""
    lines = [x.strip() for x in str(exc).strip().splitlines() if x.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:300]


# ----------------------------------------------------------------------- onnxruntime
_ORT_PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "npu": "QNNExecutionProvider",
}


def _onnxruntime(graph: ModelGraph, device: str, place: str) -> list[NodeCapability]:
    import onnxruntime as ort

    provider = _ORT_PROVIDERS.get(device)
    av = registry.availability("onnxruntime")
    if device == "cuda" and "cuda" not in av.devices:
        return _all(graph, place, False, _core.reason.BACKEND_UNAVAILABLE, f"ONNX Runtime here: {av.reason}")
    if provider is None or provider not in ort.get_available_providers():
        return _all(
            graph,
            place,
            False,
            _core.reason.BACKEND_UNAVAILABLE,
            f"ONNX Runtime {ort.__version__} here has no execution provider for {device!r} "
            f"(available: {', '.join(ort.get_available_providers())})",
        )

    def ask(model: bytes) -> tuple[bool, str, str]:
        so = ort.SessionOptions()
        so.log_severity_level = 4
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        if provider != "CPUExecutionProvider":
            so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        try:
            ort.InferenceSession(model, so, providers=[provider])
        except Exception as exc:  # noqa: BLE001 - ORT's refusal is the answer, recorded
            return False, _core.reason.OP_UNSUPPORTED, f"ONNX Runtime ({provider}): {_first_line(exc)}"
        return True, "", f"ONNX Runtime {provider} takes it"

    return _probe_all(graph, place, ask)


# -------------------------------------------------------------------------- openvino
_OV_DEVICES = {"cpu": "CPU", "gpu": "GPU", "npu": "NPU"}


def _openvino(graph: ModelGraph, device: str, place: str) -> list[NodeCapability]:
    import openvino as ov

    core = ov.Core()
    target = _OV_DEVICES.get(device)
    if target is None or target not in core.available_devices:
        return _all(
            graph,
            place,
            False,
            _core.reason.BACKEND_UNAVAILABLE,
            f"OpenVINO here has no {device!r} device (available: {', '.join(core.available_devices)})",
        )

    def ask(model: bytes) -> tuple[bool, str, str]:
        try:
            m = core.read_model(model)
            got = core.query_model(m, target)
        except Exception as exc:  # noqa: BLE001 - OpenVINO's refusal is the answer, recorded
            return False, _core.reason.OP_UNSUPPORTED, f"OpenVINO: {_first_line(exc)}"
        ops = [
            op.get_friendly_name()
            for op in m.get_ops()
            if op.get_type_name() not in ("Parameter", "Result", "Constant")
        ]
        missing = [o for o in ops if o not in got]
        if missing:
            # query_model also leaves out ops its transformations fused away (an
            # Unsqueeze folded into a Reshape): compiling the node settles it.
            try:
                core.compile_model(m, target)
            except Exception as exc:  # noqa: BLE001 - OpenVINO's refusal is the answer, recorded
                return (
                    False,
                    _core.reason.OP_UNSUPPORTED,
                    f"OpenVINO {target}.query_model leaves out {missing[0]}, and compiling it fails: {_first_line(exc)}",
                )
        return True, "", f"OpenVINO {target} takes it"

    # query_model on the whole model first: OpenVINO names each op after the ONNX node
    # (after its output when unnamed), and knows shapes a one-node probe cannot (ranks computed at run time).
    # Nodes it leaves out (folded, fused, or refused) are then probed one by one.
    try:
        whole = core.query_model(core.read_model(graph.proto.SerializeToString()), target)
    except Exception:  # noqa: BLE001 - a model it cannot read as a whole is probed node by node
        whole = {}
    probed = _probe_all(graph, place, ask)
    return [
        NodeCapability(n.name, n.op, place, True, "", f"OpenVINO {target}.query_model on the model takes it")
        if (proto.name and proto.name in whole) or any(o in whole for o in n.outputs if o)
        else p
        for n, proto, p in zip(graph.nodes, graph.proto.graph.node, probed)
    ]


# ------------------------------------------------------------------------- tensorrt
def _tensorrt(graph: ModelGraph, device: str, place: str) -> list[NodeCapability]:
    import tensorrt as trt

    if device != "cuda":
        return _all(graph, place, False, _core.reason.DEVICE_MISMATCH, "TensorRT runs on cuda only")
    logger = trt.Logger(trt.Logger.ERROR)

    def ask(model: bytes) -> tuple[bool, str, str]:
        builder = trt.Builder(logger)
        network = builder.create_network(0)
        parser = trt.OnnxParser(network, logger)
        ok = parser.supports_model(model)
        ok = ok[0] if isinstance(ok, tuple) else ok
        if ok:
            return True, "", "TensorRT's ONNX parser supports it"
        errs = [str(parser.get_error(i).desc()) for i in range(parser.num_errors)]
        return (
            False,
            _core.reason.OP_UNSUPPORTED,
            "TensorRT's ONNX parser: " + (errs[0] if errs else "unsupported"),
        )

    return _probe_all(graph, place, ask)


_ENGINES = {
    "native": _native,
    "onnxruntime": _onnxruntime,
    "openvino": _openvino,
    "tensorrt": _tensorrt,
    "qnn": lambda graph, device, place: (
        _onnxruntime(graph, "npu" if device == "npu" else device, place)
        if device == "npu"
        else _all(graph, place, False, _core.reason.DEVICE_MISMATCH, "QNN runs on npu only")
    ),
}
