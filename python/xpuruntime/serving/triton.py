"""Triton's model-configuration and statistics extensions, over REST and gRPC.

    GET /v2/models/{m}[/versions/{v}]/config    the model's (auto-completed) configuration
    GET /v2/models/stats                        statistics of every loaded model version
    GET /v2/models/{m}[/versions/{v}]/stats     one model's statistics
    gRPC GRPCInferenceService/ModelConfig, /ModelStatistics

The configuration carries the fields tritonclient, perf_analyzer and Model Analyzer
read (name, platform, backend, max_batch_size, input/output with data_type and dims
without the batch dimension, -1 for variable ones, dynamic_batching, instance_group,
version_policy), plus xpuruntime's own under ``parameters`` (engine, device, shape
buckets, policy fingerprint, where the configuration came from). Statistics follow
Triton's definitions: per request success/fail/queue/compute_input/compute_infer/
compute_output (count and total ns), per executed batch size the compute times,
``inference_count`` (rows) and ``execution_count`` (model runs).

Unknown routes get a JSON 404 body and a wrong method a JSON 405 with ``Allow``.
"""

from __future__ import annotations

import functools
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .protocol import ServingError

PROTO = Path(__file__).parent / "proto" / "model_config_ext.proto"
SERVICE = "inference.GRPCInferenceService"
BACKEND = "xpuruntime"


# ------------------------------------------------------------------ statistics
class _Duration:
    __slots__ = ("count", "ns")

    def __init__(self) -> None:
        self.count = 0
        self.ns = 0

    def add(self, seconds: float, count: int = 1) -> None:
        self.count += count
        self.ns += int(seconds * 1e9) * count

    def to_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


class ModelStatistics:
    """Cumulative statistics of one model version (Triton's ModelStatistics). Thread-safe."""

    _FIELDS = (
        "success",
        "fail",
        "queue",
        "compute_input",
        "compute_infer",
        "compute_output",
        "cache_hit",
        "cache_miss",
    )

    def __init__(self, name: str, version: str) -> None:
        self.name, self.version = name, version
        self._lock = threading.Lock()
        self._d = {f: _Duration() for f in self._FIELDS}
        self._batches: dict[int, tuple[_Duration, _Duration, _Duration]] = {}
        self.inference_count = 0
        self.execution_count = 0
        self.last_inference_ms = 0

    def observe(
        self,
        rows: list[int],
        batch_size: int,
        t_enqueue: list[float],
        t_start: float,
        timings: list[float],
        t_end: float,
    ) -> None:
        """One model run of ``len(rows)`` requests (each its queue time; the run's phases shared)."""
        t_in, t_infer, t_out = timings if len(timings) == 3 else (0.0, t_end - t_start, 0.0)
        n = len(rows)
        with self._lock:
            d = self._d
            for te in t_enqueue:
                d["success"].add(t_end - te)
                d["queue"].add(t_start - te)
            d["compute_input"].add(t_in, n)
            d["compute_infer"].add(t_infer, n)
            d["compute_output"].add(t_out, n)
            b = self._batches.setdefault(batch_size, (_Duration(), _Duration(), _Duration()))
            b[0].add(t_in)
            b[1].add(t_infer)
            b[2].add(t_out)
            self.inference_count += sum(rows)
            self.execution_count += 1
            self.last_inference_ms = time.time_ns() // 1_000_000

    def failure(self, seconds: float) -> None:
        """A request that failed after ``seconds``."""
        with self._lock:
            self._d["fail"].add(seconds)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of Triton's ModelStatistics."""
        with self._lock:
            return {
                "name": self.name,
                "version": self.version,
                "last_inference": self.last_inference_ms,
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "inference_stats": {f: d.to_dict() for f, d in self._d.items()},
                "batch_stats": [
                    {
                        "batch_size": size,
                        "compute_input": b[0].to_dict(),
                        "compute_infer": b[1].to_dict(),
                        "compute_output": b[2].to_dict(),
                    }
                    for size, b in sorted(self._batches.items())
                ],
            }


def statistics(repo: Any, name: str = "", version: str = "") -> dict[str, Any]:
    """``{"model_stats": [...]}`` of one model version, or of every loaded one (``name`` empty)."""
    if name:
        scheds = [repo.get(name, version)]
    else:
        scheds = repo.schedulers()
    return {"model_stats": [s.stats.to_dict() for s in scheds]}


# ------------------------------------------------------------------ configuration
def _data_type(datatype: str) -> str:
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def model_config(model: Any) -> dict[str, Any]:
    """The JSON form of Triton's ModelConfig for a :class:`ServedModel`."""
    cfg = model.config
    md = model.metadata()
    batched = cfg.max_batch_size > 0

    def dims(shape: list[int]) -> list[int]:
        return shape[1:] if batched else shape

    device = str(model.device)
    gpu = device.startswith(("cuda", "gpu"))
    group: dict[str, Any] = {
        "name": f"{model.name}_0",
        "kind": "KIND_GPU" if gpu else "KIND_CPU",
        "count": cfg.instances,
    }
    if gpu:
        group["gpus"] = [int(device.partition(":")[2] or 0)]
    out: dict[str, Any] = {
        "name": model.name,
        "platform": BACKEND,
        "backend": BACKEND,
        "version_policy": (
            {"specific": {"versions": list(cfg.versions)}}
            if cfg.versions
            else {"latest": {"num_versions": 1}}
        ),
        "max_batch_size": cfg.max_batch_size,
        "input": [
            {
                "name": t["name"],
                "data_type": _data_type(t["datatype"]),
                "format": "FORMAT_NONE",
                "dims": dims(t["shape"]),
            }
            for t in md["inputs"]
        ],
        "output": [
            {"name": t["name"], "data_type": _data_type(t["datatype"]), "dims": dims(t["shape"])}
            for t in md["outputs"]
        ],
        "instance_group": [group],
        "default_model_filename": Path(model.path).name,
        "model_transaction_policy": {"decoupled": False},
        "parameters": {
            k: {"string_value": str(v)}
            for k, v in {
                "engine": model.engine,
                "device": device,
                "shape_buckets": ",".join(str(b) for b in model.buckets),
                "padded_dims": ";".join(
                    f"{k}:{','.join(str(v) for v in sizes)}" for k, sizes in sorted(model.padded.items())
                ),
                "policy_fingerprint": model.policy_fingerprint,
                "config_source": cfg.source or "auto-complete (no config file)",
                "auto_completed": ",".join(sorted({"max_batch_size"} - cfg.given)) if batched else "",
            }.items()
        },
    }
    if cfg.dynamic_batching is not None:
        out["dynamic_batching"] = {
            "preferred_batch_size": list(cfg.dynamic_batching.preferred_batch_sizes),
            "max_queue_delay_microseconds": cfg.dynamic_batching.max_queue_delay_us,
            "preserve_ordering": False,
        }
    return out


# ------------------------------------------------------------------ REST
def _not_found_body(method: str, path: str) -> dict[str, str]:
    return {
        "error": f"no route {method} {path}; the server answers the Open Inference Protocol under /v2 "
        "(GET /v2 for its metadata, GET /v2/models/NAME for a model's; see docs/serving.md)"
    }


def rest_routes(server: Any) -> list[Any]:
    """Starlette routes of the extensions (they go before the model-metadata routes)."""
    import orjson
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    repo = server.repository

    def answer(fn: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            p = request.path_params
            try:
                body = fn(p.get("name", ""), p.get("version", ""))
                status = 200
            except ServingError as exc:
                body, status = {"error": str(exc)}, exc.http_status
            return Response(orjson.dumps(body), status_code=status, media_type="application/json")

        return endpoint

    config = answer(lambda name, version: model_config(repo.get(name, version).model))
    stats = answer(lambda name, version: statistics(repo, name, version))

    async def infer_method(request: Request) -> Response:
        # POST .../infer is answered by rest.py's fast path before routing; this route
        # exists so that other methods on it get a 405 rather than a 404.
        body = {"error": f"POST {request.url.path} was not taken by the inference path; please report it"}
        return Response(orjson.dumps(body), status_code=500, media_type="application/json")

    routes = [Route("/v2/models/stats", stats, methods=["GET"])]
    for base in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
        routes += [
            Route(base + "/config", config, methods=["GET"]),
            Route(base + "/stats", stats, methods=["GET"]),
            Route(base + "/infer", infer_method, methods=["POST"]),  # so other methods get a 405
        ]
    return routes


def rest_exception_handlers() -> dict[Any, Any]:
    """JSON bodies for Starlette's 404 (no route) and 405 (wrong method)."""
    import orjson
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import Response

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        method, path = request.method, request.url.path
        if exc.status_code == 404:
            body = _not_found_body(method, path)
        elif exc.status_code == 405:
            allowed = ", ".join(
                sorted(m.strip() for m in (exc.headers or {}).get("Allow", "").split(",") if m.strip())
            )
            body = {"error": f"method {method} is not allowed on {path}; allowed: {allowed or 'none'}"}
        else:
            body = {"error": str(exc.detail)}
        return Response(
            orjson.dumps(body),
            status_code=exc.status_code,
            headers=exc.headers,
            media_type="application/json",
        )

    return {HTTPException: http_error}


# ------------------------------------------------------------------ gRPC
@functools.lru_cache(maxsize=1)
def messages() -> dict[str, type]:
    """Message classes of model_config_ext.proto (compiled once, into a pool of our own)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ext.pb"
        rc = protoc.main(["protoc", f"-I{PROTO.parent}", f"--descriptor_set_out={out}", PROTO.name])
        if rc != 0 or not out.is_file():
            raise RuntimeError(f"grpcio-tools could not compile {PROTO} (protoc exit {rc})")
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    fd = pool.FindFileByName(PROTO.name)
    return {name: message_factory.GetMessageClass(d) for name, d in fd.message_types_by_name.items()}


def grpc_handler(server: Any) -> Any:
    """A generic handler for GRPCInferenceService/ModelConfig and /ModelStatistics."""
    import grpc
    from google.protobuf import json_format

    msgs = messages()
    repo = server.repository

    def call(fn: Any, response: str) -> Any:
        def handler(request: Any, context: grpc.ServicerContext) -> Any:
            try:
                doc = fn(request.name, request.version)
            except ServingError as exc:
                context.abort(getattr(grpc.StatusCode, exc.grpc_code), str(exc))
            return json_format.ParseDict(doc, msgs[response]())

        return handler

    table = {
        "ModelConfig": grpc.unary_unary_rpc_method_handler(
            call(lambda n, v: {"config": model_config(repo.get(n, v).model)}, "ModelConfigResponse"),
            request_deserializer=msgs["ModelConfigRequest"].FromString,
            response_serializer=msgs["ModelConfigResponse"].SerializeToString,
        ),
        "ModelStatistics": grpc.unary_unary_rpc_method_handler(
            call(lambda n, v: statistics(repo, n, v), "ModelStatisticsResponse"),
            request_deserializer=msgs["ModelStatisticsRequest"].FromString,
            response_serializer=msgs["ModelStatisticsResponse"].SerializeToString,
        ),
    }
    return grpc.method_handlers_generic_handler(SERVICE, table)


__all__ = [
    "ModelStatistics",
    "grpc_handler",
    "model_config",
    "rest_exception_handlers",
    "rest_routes",
    "statistics",
]
