"""The REST front end: the Open Inference Protocol's HTTP/JSON API on Starlette.

Endpoints (``{v}`` versions are optional everywhere a model is named)::

    GET  /v2                                    server metadata
    GET  /v2/health/live | /v2/health/ready     health
    GET  /v2/models/{m}[/versions/{v}]          model metadata
    GET  /v2/models/{m}[/versions/{v}]/ready    model readiness
    POST /v2/models/{m}[/versions/{v}]/infer    inference: JSON tensors and the binary tensor extension
    GET  /v2/models/{m}[/versions/{v}]/explain  the session's Decisions (xpuruntime's extension)
    POST /v2/repository/index                   model-repository extension
    POST /v2/repository/models/{m}/load | /unload
    GET  /metrics                               Prometheus
    GET  /v2/models/{m}[/versions/{v}]/config   model-configuration extension (serving/triton.py)
    GET  /v2/models[/{m}[/versions/{v}]]/stats  statistics extension (serving/triton.py)

Starlette (the ASGI toolkit FastAPI is built on) is used directly: the protocol's
bodies are parsed by hand anyway (the binary extension is not JSON), and skipping
FastAPI's per-request dependency resolution keeps the added latency low. The infer
endpoint, the hot path, is answered by a thin ASGI handler in front of Starlette.
"""

from __future__ import annotations

import concurrent.futures
import re
import zlib
from typing import Any

import numpy as np
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .metrics import CONTENT_TYPE
from .protocol import (
    InferRequest,
    InferResponse,
    RequestedOutput,
    ServingError,
    array_from_bytes,
    array_from_list,
    check_finite_for_json,
    check_load_parameters,
    check_model_name,
    check_shape,
    datatype_of,
    dtype_of,
    invalid,
    loads_json,
    raw_bytes,
    too_large,
)

HEADER_LENGTH = "inference-header-content-length"
_JSON = "application/json"
# Header values that are lengths: ASCII digits only (str.isdigit() also takes "²" and "٣").
_DIGITS = re.compile(r"[0-9]{1,19}")


def _error(exc: ServingError) -> Response:
    return Response(orjson.dumps({"error": str(exc)}), status_code=exc.http_status, media_type=_JSON)


def _json(obj: Any, status: int = 200) -> Response:
    return Response(
        orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY), status_code=status, media_type=_JSON
    )


async def _body(headers: dict[bytes, bytes], receive: Any, limit: int) -> bytes:
    """The request body (ASGI ``receive``), refused with 413 as soon as it exceeds ``limit``."""
    declared = headers.get(b"content-length", b"").decode("latin-1")
    if _DIGITS.fullmatch(declared) and int(declared) > limit:
        raise too_large(f"request body of {declared} bytes exceeds the server's limit of {limit} bytes")
    chunks = []
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise invalid("the client disconnected before sending the whole body")
        chunk = message.get("body", b"")
        more = message.get("more_body", False)
        size += len(chunk)
        if size > limit:
            raise too_large(f"request body exceeds the server's limit of {limit} bytes")
        chunks.append(chunk)
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    encoding = headers.get(b"content-encoding", b"").decode("latin-1").lower()
    if encoding in ("gzip", "deflate"):
        try:
            d = zlib.decompressobj(31 if encoding == "gzip" else 15)
            body = d.decompress(body, limit + 1)
        except zlib.error as exc:
            raise invalid(f"request body is not valid {encoding} data: {exc}") from None
        if len(body) > limit:
            raise too_large(f"decompressed request body exceeds the server's limit of {limit} bytes")
    elif encoding not in ("", "identity"):
        raise invalid(f"Content-Encoding {encoding!r} is not supported; use gzip, deflate or none")
    return body


def parse_infer(body: bytes, header_length: str | None, model: str, version: str) -> InferRequest:
    """An InferRequest from a REST body (JSON, optionally followed by binary tensor data)."""
    if header_length is not None:
        if not _DIGITS.fullmatch(header_length) or int(header_length) > len(body):
            raise invalid(
                f"Inference-Header-Content-Length {header_length[:32]!r} is not a length within the "
                f"{len(body)}-byte body; send the JSON header's size in bytes as ASCII digits"
            )
        n = int(header_length)
        head, binary = body[:n], memoryview(body)[n:]
    else:
        head, binary = body, memoryview(b"")
    doc = loads_json(head)
    if not isinstance(doc, dict):
        raise invalid("the request body must be a JSON object with an 'inputs' list")
    tensors = doc.get("inputs")
    if not isinstance(tensors, list) or not tensors:
        raise invalid("the request needs a non-empty 'inputs' list of tensors")
    inputs: dict[str, np.ndarray] = {}
    offset = 0
    for k, t in enumerate(tensors):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise invalid(f"inputs[{k}] must be an object with a 'name'")
        name = t["name"]
        where = f"input '{name}'"
        if name in inputs:
            raise invalid(f"{where} is given twice")
        dt = dtype_of(t.get("datatype", ""), where)
        shape = check_shape(t.get("shape"), where)
        params = t.get("parameters") or {}
        size = params.get("binary_data_size") if isinstance(params, dict) else None
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise invalid(f"{where}: binary_data_size must be a non-negative integer")
            if offset + size > len(binary):
                raise invalid(
                    f"{where}: binary data truncated: needs {size} bytes at offset {offset} but only "
                    f"{len(binary) - offset} follow the JSON header"
                )
            inputs[name] = array_from_bytes(binary[offset : offset + size], dt, shape, where)
            offset += size
        elif "data" in t:
            inputs[name] = array_from_list(t["data"], dt, shape, where)
        else:
            raise invalid(f"{where} has neither 'data' nor a binary_data_size parameter")
    if offset != len(binary):
        raise invalid(f"{len(binary) - offset} bytes of binary data follow the last binary input")
    top = doc.get("parameters") or {}
    if not isinstance(top, dict):
        raise invalid("'parameters' must be an object")
    all_binary = _flag(top, "binary_data_output", False, "'parameters'")
    outputs = None
    if doc.get("outputs") is not None:
        if not isinstance(doc["outputs"], list):
            raise invalid("'outputs' must be a list of {name, parameters}")
        outputs = []
        for k, o in enumerate(doc["outputs"]):
            if not isinstance(o, dict) or not isinstance(o.get("name"), str):
                raise invalid(f"outputs[{k}] must be an object with a 'name'")
            op = o.get("parameters") or {}
            if not isinstance(op, dict):
                raise invalid(f"outputs[{k}]: 'parameters' must be an object")
            binary_out = _flag(op, "binary_data", all_binary, f"output '{o['name']}'")
            outputs.append(RequestedOutput(o["name"], binary_out))
    rid = doc.get("id", "")
    if not isinstance(rid, str):
        raise invalid(f"'id' must be a string, got a JSON {type(rid).__name__}")
    return InferRequest(model, version, inputs, outputs, rid, top, all_binary)


def _flag(params: dict[str, Any], key: str, default: bool, where: str) -> bool:
    """A boolean parameter: JSON true/false only (the string "false" is not false)."""
    value = params.get(key, default)
    if not isinstance(value, bool):
        raise invalid(f"{where}: parameter '{key}' must be true or false, got {value!r:.64}")
    return value


def render_infer(resp: InferResponse, req: InferRequest) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The REST response body and headers: JSON tensors, or binary ones after the JSON header."""
    binary_names = {o.name for o in req.outputs if o.binary} if req.outputs else set()
    if not req.outputs and req.binary_outputs:
        binary_names = set(resp.outputs)
    outs = []
    chunks: list[bytes] = []
    for name, value in resp.outputs.items():
        arr = np.ascontiguousarray(value)
        t: dict[str, Any] = {"name": name, "datatype": datatype_of(arr.dtype), "shape": list(arr.shape)}
        if name in binary_names:
            raw = raw_bytes(arr)
            t["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            check_finite_for_json(name, arr)
            # orjson writes float16 arrays not at all, float32 as the shortest text that
            # reads back to the same float32; float16 widens to float32 exactly.
            t["data"] = (arr.astype(np.float32) if arr.dtype == np.float16 else arr).reshape(-1)
        outs.append(t)
    doc: dict[str, Any] = {
        "model_name": resp.model,
        "model_version": resp.version,
        "parameters": resp.parameters,
        "outputs": outs,
    }
    if resp.id:
        doc["id"] = resp.id
    head = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
    if not chunks:
        return head, [(b"content-type", _JSON.encode())]
    return b"".join([head, *chunks]), [
        (b"content-type", b"application/octet-stream"),
        (b"inference-header-content-length", str(len(head)).encode()),
    ]


_INFER_PATH = re.compile(r"/v2/models/(?P<name>[^/]+)(?:/versions/(?P<version>[^/]+))?/infer")


class _InferFastPath:
    """ASGI app: POST .../infer is handled here directly, everything else by Starlette.

    Inference is the hot path; answering it below Starlette's middleware, routing and
    Request/Response objects saves a good part of the per-request cost.
    """

    def __init__(self, app: Starlette, server: Any) -> None:
        self.app = app
        self.repo = server.repository
        self.metrics = server.metrics
        self.executor: concurrent.futures.Executor = server.executor
        self.limit = server.max_request_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            m = _INFER_PATH.fullmatch(scope["path"])
            if m is not None:
                # The server decoded the path once (scope["path"]); a name is never decoded again.
                await self._infer(scope, receive, send, m["name"], m["version"] or "")
                return
        await self.app(scope, receive, send)

    async def _infer(self, scope: dict[str, Any], receive: Any, send: Any, name: str, version: str) -> None:
        # Metrics are labelled by model only once the model is known: names from bad
        # requests must not grow the label set without bound.
        label = ("", "")
        try:
            sched = self.repo.get(name, version)
            label = (name, sched.model.version)
            sched.request_counters["rest"].inc()
            headers = dict(scope["headers"])
            body = await _body(headers, receive, self.limit)
            length = headers.get(HEADER_LENGTH.encode())
            req = parse_infer(
                body, None if length is None else length.decode("latin-1"), name, sched.model.version
            )
            resp = await sched.infer_async(req, self.executor)
            status, (payload, extra) = 200, render_infer(resp, req)
        except ServingError as exc:
            self.metrics.failures.labels(*label, "rest", exc.grpc_code).inc()
            status, payload, extra = (
                exc.http_status,
                orjson.dumps({"error": str(exc)}),
                [(b"content-type", _JSON.encode())],
            )
        except Exception as exc:  # noqa: BLE001 - a server fault: answered with what failed, never a bare 500
            self.metrics.failures.labels(*label, "rest", "INTERNAL").inc()
            status, payload, extra = 500, _internal(exc), [(b"content-type", _JSON.encode())]
        extra.append((b"content-length", str(len(payload)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": extra})
        await send({"type": "http.response.body", "body": payload})


def build_app(server: Any) -> Any:
    """The ASGI app over ``server`` (an :class:`xpuruntime.serving.InferenceServer`)."""
    repo = server.repository
    metrics = server.metrics
    executor: concurrent.futures.Executor = server.executor

    def _model(request: Request) -> tuple[str, str]:
        return request.path_params["name"], request.path_params.get("version", "")

    async def live(request: Request) -> Response:
        return _json({"live": True})

    async def ready(request: Request) -> Response:
        ok = server.ready()
        return _json({"ready": ok}, 200 if ok else 503)

    async def server_metadata(request: Request) -> Response:
        return _json(server.server_metadata())

    async def model_metadata(request: Request) -> Response:
        try:
            return _json(repo.get(*_model(request)).model.metadata())
        except ServingError as exc:
            return _error(exc)

    async def model_ready(request: Request) -> Response:
        ok = repo.is_ready(*_model(request))
        return _json({"name": request.path_params["name"], "ready": ok}, 200 if ok else 503)

    async def explain(request: Request) -> Response:
        try:
            m = repo.get(*_model(request)).model
        except ServingError as exc:
            return _error(exc)
        return _json(
            {
                "model_name": m.name,
                "model_version": m.version,
                "engine": m.engine,
                "device": m.device,
                "policy_fingerprint": m.policy_fingerprint,
                "decisions": m.explain(),
            }
        )

    async def repo_index(request: Request) -> Response:
        ready_only = False
        try:
            body = await _body(dict(request.scope["headers"]), request.receive, server.max_request_bytes)
            if body.strip():
                doc = loads_json(body)
                if not isinstance(doc, dict):
                    raise invalid('the repository index request must be a JSON object like {"ready": true}')
                ready_only = _flag(doc, "ready", False, "repository index request")
        except ServingError as exc:
            return _error(exc)
        return _json(repo.index(ready_only))

    async def repo_load(request: Request) -> Response:
        try:
            check_model_name(request.path_params["name"])
            body = await _body(dict(request.scope["headers"]), request.receive, server.max_request_bytes)
            if body.strip():
                doc = loads_json(body)
                if not isinstance(doc, dict):
                    raise invalid("the load request body must be a JSON object (or empty)")
                params = doc.get("parameters")
                if params is not None and not isinstance(params, dict):
                    raise invalid("the load request's 'parameters' must be an object")
                check_load_parameters(params)
            await _in_thread(executor, repo.load, request.path_params["name"])
        except ServingError as exc:
            return _error(exc)
        return _json({})

    async def repo_unload(request: Request) -> Response:
        try:
            await _in_thread(executor, repo.unload, request.path_params["name"])
        except ServingError as exc:
            return _error(exc)
        return _json({})

    async def prometheus(request: Request) -> Response:
        return Response(metrics.render(repo.devices()), media_type=CONTENT_TYPE)

    m = "/v2/models/{name}"
    mv = "/v2/models/{name}/versions/{version}"
    routes = [
        Route("/v2", server_metadata, methods=["GET"]),
        Route("/v2/health/live", live, methods=["GET"]),
        Route("/v2/health/ready", ready, methods=["GET"]),
        Route("/v2/repository/index", repo_index, methods=["POST"]),
        Route("/v2/repository/models/{name}/load", repo_load, methods=["POST"]),
        Route("/v2/repository/models/{name}/unload", repo_unload, methods=["POST"]),
        Route("/metrics", prometheus, methods=["GET"]),
    ]
    for base in (m, mv):
        routes += [
            Route(base, model_metadata, methods=["GET"]),
            Route(base + "/ready", model_ready, methods=["GET"]),
            Route(base + "/explain", explain, methods=["GET"]),
        ]
    from .access_log import AccessLogMiddleware
    from .triton import rest_exception_handlers, rest_routes

    # 405 names the allowed methods (rest_exception_handlers); 404 does not echo the
    # path; a fault of the server itself is a 500 saying what failed.
    handlers = {**rest_exception_handlers(), 404: _no_route, Exception: _server_fault}
    # The extensions' routes first: /v2/models/stats is not a model named "stats".
    app = Starlette(routes=rest_routes(server) + routes, exception_handlers=handlers)
    return AccessLogMiddleware(_InferFastPath(app, server))


def _internal(exc: BaseException) -> bytes:
    return orjson.dumps({"error": f"internal server error: {type(exc).__name__}: {str(exc)[:512]}"})


async def _no_route(request: Request, exc: Exception) -> Response:
    """No route for the method and path: the protocol's JSON error, the path not echoed."""
    status = getattr(exc, "status_code", 404)
    what = "method" if status == 405 else "path"
    return Response(
        orjson.dumps({"error": f"no endpoint of the Open Inference Protocol has this {what}; see GET /v2"}),
        status_code=status,
        media_type=_JSON,
    )


async def _server_fault(request: Request, exc: Exception) -> Response:
    """A fault of the server itself (a client's mistake is a ServingError): 500 with what failed."""
    return Response(_internal(exc), status_code=500, media_type=_JSON)


async def _in_thread(executor: concurrent.futures.Executor, fn: Any, *args: Any) -> Any:
    import asyncio

    return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)


__all__ = ["build_app", "parse_infer", "render_infer"]
