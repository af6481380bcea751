"""The gRPC front end: ``inference.GRPCInferenceService`` of the Open Inference Protocol.

The protocol's ``.proto`` (``proto/grpc_predict_v2.proto``) is compiled by grpcio-tools
when the service is first built, into a descriptor pool of our own: no generated
code to keep in step with the protobuf runtime, and no clash with a client library
(tritonclient) that registers the same ``inference.*`` messages in the default pool
of the same process. Handlers are registered generically under the protocol's
service name, so any protocol client (tritonclient, KServe's) talks to it unchanged.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from .protocol import (
    InferRequest,
    InferResponse,
    RequestedOutput,
    ServingError,
    array_from_bytes,
    array_from_list,
    check_load_parameters,
    check_model_name,
    check_shape,
    datatype_of,
    dtype_of,
    invalid,
    raw_bytes,
)

SERVICE = "inference.GRPCInferenceService"
PROTO = Path(__file__).parent / "proto" / "grpc_predict_v2.proto"

# Typed-contents field of InferTensorContents for each datatype (FP16 and BF16 have
# none in the protocol: they travel as raw bytes only).
_CONTENTS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
}


@functools.lru_cache(maxsize=1)
def messages() -> dict[str, type]:
    """Message classes of the protocol, by unqualified name (compiled once per process)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "oip.pb"
        rc = protoc.main(["protoc", f"-I{PROTO.parent}", f"--descriptor_set_out={out}", PROTO.name])
        if rc != 0 or not out.is_file():
            raise RuntimeError(f"grpcio-tools could not compile {PROTO} (protoc exit {rc})")
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    fd = pool.FindFileByName(PROTO.name)
    return {name: message_factory.GetMessageClass(d) for name, d in fd.message_types_by_name.items()}


def _set_param(p: Any, value: Any) -> None:
    if isinstance(value, bool):
        p.bool_param = value
    elif isinstance(value, int):
        p.int64_param = value
    elif isinstance(value, float):
        p.double_param = value
    else:
        p.string_param = str(value)


def _get_param(p: Any) -> Any:
    which = p.WhichOneof("parameter_choice")
    return getattr(p, which) if which else None


def parse_infer(msg: Any) -> InferRequest:
    """An InferRequest from a ModelInferRequest (raw contents or typed contents).

    Raw contents become arrays over the message's bytes without a copy.
    """
    raw = msg.raw_input_contents
    tensors = msg.inputs
    if raw and len(raw) != len(tensors):
        raise invalid(
            f"{len(raw)} raw_input_contents for {len(tensors)} inputs; send one raw buffer per input "
            "or typed contents for all"
        )
    if not tensors:
        raise invalid("the request needs at least one input tensor")
    inputs: dict[str, np.ndarray] = {}
    for k, t in enumerate(tensors):
        name = t.name
        if name in inputs:
            raise invalid(f"input '{name}' is given twice")
        where = f"input '{name}'"
        dt = dtype_of(t.datatype, where)
        shape = tuple(t.shape)  # uint64/int64 on the wire: always integers
        if raw:
            if t.HasField("contents") and t.contents.ByteSize():
                raise invalid(f"{where} has both typed contents and raw_input_contents; send one of them")
            inputs[name] = array_from_bytes(raw[k], dt, check_shape(shape, where), where)
        else:
            field = _CONTENTS.get(t.datatype.upper())
            if field is None:
                raise invalid(f"{where}: datatype {t.datatype} travels in raw_input_contents only")
            inputs[name] = array_from_list(
                list(getattr(t.contents, field)), dt, check_shape(shape, where), where
            )
    outputs = [RequestedOutput(o.name) for o in msg.outputs] or None
    params = {k: _get_param(v) for k, v in msg.parameters.items()} if msg.parameters else {}
    return InferRequest(msg.model_name, msg.model_version, inputs, outputs, msg.id, params, bool(raw))


def _shared_prefix(resp: InferResponse) -> bytes:
    """The encoded ModelInferResponse fields that ``resp.shared`` stands for (cached on it).

    A protobuf message's serialization followed by another's parses as the two merged
    (the protocol buffers encoding spec: repeated and map fields concatenate), so a
    response is this cached prefix followed by the fields of its own.
    """
    assert resp.shared is not None
    key = ("grpc", resp.model, resp.version)
    prefix = resp.shared.encoded.get(key)
    if prefix is None:
        m = messages()["ModelInferResponse"](model_name=resp.model, model_version=resp.version)
        for k, v in resp.shared.values.items():
            _set_param(m.parameters[k], v)
        prefix = m.SerializeToString(deterministic=True)
        resp.shared.encoded[key] = prefix
    return prefix


def render_infer(resp: InferResponse, raw: bool) -> bytes:
    """A serialized ModelInferResponse; tensors as raw bytes when the request sent raw bytes."""
    m = messages()["ModelInferResponse"]()
    if resp.shared is not None:
        prefix = _shared_prefix(resp)
        shared = resp.shared.values
        own = {k: v for k, v in resp.parameters.items() if k not in shared}
    else:
        prefix = b""
        m.model_name = resp.model
        m.model_version = resp.version
        own = resp.parameters
    if resp.id:
        m.id = resp.id
    for k, v in own.items():
        _set_param(m.parameters[k], v)
    for name, value in resp.outputs.items():
        arr = np.ascontiguousarray(value)
        o = m.outputs.add()
        o.name = name
        o.datatype = datatype_of(arr.dtype)
        o.shape.extend(arr.shape)
        field = _CONTENTS.get(o.datatype)
        if raw or field is None:
            m.raw_output_contents.append(raw_bytes(arr))
        else:
            getattr(o.contents, field).extend(arr.reshape(-1).tolist())
    return prefix + m.SerializeToString()


class InferenceServicer:
    """Handlers of GRPCInferenceService over an :class:`xpuruntime.serving.InferenceServer`."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.repo = server.repository
        self.metrics = server.metrics
        self.msg = messages()

    def _abort(self, context: grpc.ServicerContext, exc: ServingError) -> None:
        context.abort(getattr(grpc.StatusCode, exc.grpc_code), str(exc))

    def ServerLive(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self.msg["ServerLiveResponse"](live=True)

    def ServerReady(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self.msg["ServerReadyResponse"](ready=self.server.ready())

    def ModelReady(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self.msg["ModelReadyResponse"](ready=self.repo.is_ready(request.name, request.version))

    def ServerMetadata(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self.msg["ServerMetadataResponse"](**self.server.server_metadata())

    def ModelMetadata(self, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            md = self.repo.get(request.name, request.version).model.metadata()
        except ServingError as exc:
            self._abort(context, exc)
        tm = self.msg["ModelMetadataResponse"].TensorMetadata
        return self.msg["ModelMetadataResponse"](
            name=md["name"],
            versions=md["versions"],
            platform=md["platform"],
            inputs=[tm(**t) for t in md["inputs"]],
            outputs=[tm(**t) for t in md["outputs"]],
        )

    def ModelInfer(self, request: Any, context: grpc.ServicerContext) -> bytes:
        name, version = request.model_name, request.model_version
        label = ("", "")  # labelled by model once the model is known (bounded label set)
        try:
            sched = self.repo.get(name, version)
            label = (name, sched.model.version)
            sched.request_counters["grpc"].inc()
            req = parse_infer(request)
            req.version = sched.model.version
            return render_infer(sched.infer(req), req.binary_outputs)
        except ServingError as exc:
            self.metrics.failures.labels(*label, "grpc", exc.grpc_code).inc()
            self._abort(context, exc)
            raise  # not reached: abort raises

    def RepositoryIndex(self, request: Any, context: grpc.ServicerContext) -> Any:
        mi = self.msg["RepositoryIndexResponse"].ModelIndex
        models = [mi(**{k: str(v) for k, v in e.items()}) for e in self.repo.index(request.ready)]
        return self.msg["RepositoryIndexResponse"](models=models)

    def RepositoryModelLoad(self, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            check_model_name(request.model_name)
            check_load_parameters(dict(request.parameters))
            self.repo.load(request.model_name)
        except ServingError as exc:
            self._abort(context, exc)
        return self.msg["RepositoryModelLoadResponse"]()

    def RepositoryModelUnload(self, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            self.repo.unload(request.model_name)
        except ServingError as exc:
            self._abort(context, exc)
        return self.msg["RepositoryModelUnloadResponse"]()


_METHODS = {
    "ServerLive": ("ServerLiveRequest", "ServerLiveResponse"),
    "ServerReady": ("ServerReadyRequest", "ServerReadyResponse"),
    "ModelReady": ("ModelReadyRequest", "ModelReadyResponse"),
    "ServerMetadata": ("ServerMetadataRequest", "ServerMetadataResponse"),
    "ModelMetadata": ("ModelMetadataRequest", "ModelMetadataResponse"),
    "ModelInfer": ("ModelInferRequest", "ModelInferResponse"),
    "RepositoryIndex": ("RepositoryIndexRequest", "RepositoryIndexResponse"),
    "RepositoryModelLoad": ("RepositoryModelLoadRequest", "RepositoryModelLoadResponse"),
    "RepositoryModelUnload": ("RepositoryModelUnloadRequest", "RepositoryModelUnloadResponse"),
}


def _as_is(payload: bytes) -> bytes:
    return payload


class _Undecodable:
    """A request that is not a valid message of its type (the handler answers INVALID_ARGUMENT)."""

    def __init__(self, kind: str, error: Exception) -> None:
        self.message = f"the request is not a valid {kind} protobuf message: {str(error)[:200]}"


def _lenient(cls: Any, kind: str) -> Any:
    """A deserializer that never raises: grpcio answers INTERNAL for one that does."""

    def parse(payload: bytes) -> Any:
        try:
            return cls.FromString(payload)
        except Exception as exc:  # noqa: BLE001 - DecodeError and kin: answered INVALID_ARGUMENT
            return _Undecodable(kind, exc)

    return parse


def _checked(fn: Any) -> Any:
    def call(request: Any, context: grpc.ServicerContext) -> Any:
        if isinstance(request, _Undecodable):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        return fn(request, context)

    return call


def handler(servicer: InferenceServicer) -> grpc.GenericRpcHandler:
    """The generic handler that routes /inference.GRPCInferenceService/* to ``servicer``."""
    msgs = messages()
    table = {
        method: grpc.unary_unary_rpc_method_handler(
            _checked(getattr(servicer, method)),
            request_deserializer=_lenient(msgs[req], req),
            # ModelInfer's handler answers serialized bytes (see render_infer).
            response_serializer=_as_is if method == "ModelInfer" else msgs[resp].SerializeToString,
        )
        for method, (req, resp) in _METHODS.items()
    }
    return grpc.method_handlers_generic_handler(SERVICE, table)
