"""Prometheus metrics of one server (its own registry, so several servers may share a process)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (
    50e-6,
    100e-6,
    200e-6,
    500e-6,
    1e-3,
    2e-3,
    5e-3,
    10e-3,
    20e-3,
    50e-3,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


PROTOCOLS = ("rest", "grpc")


class ModelMetrics:
    """One model version's label children, bound once so a request does no label lookup.

    ``requests`` maps each protocol (``PROTOCOLS``) to its request counter.
    """

    def __init__(
        self, requests: dict[str, Any], batch_size: Any, compute: Any, queue: Any, depth: Any
    ) -> None:
        self.requests = requests
        self.batch_size, self.compute, self.queue, self.depth = batch_size, compute, queue, depth

    def observe_batch(self, rows: int, compute_s: float, queue_s: list[float]) -> None:
        """Record one batch run and the queue time of each request in it."""
        self.batch_size.observe(rows)
        for q in queue_s:
            self.compute.observe(compute_s)
            self.queue.observe(q)


class ServerMetrics:
    """Requests, failures, queue and compute latency, batch sizes, queue depth, device memory."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "xrt_inference_requests",
            "Inference requests received",
            ["model", "version", "protocol"],
            registry=r,
        )
        self.failures = Counter(
            "xrt_inference_failures",
            "Inference requests that failed",
            ["model", "version", "protocol", "code"],
            registry=r,
        )
        self.queue_seconds = Histogram(
            "xrt_inference_queue_seconds",
            "Time a request waited in the model's queue",
            ["model", "version"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.compute_seconds = Histogram(
            "xrt_inference_compute_seconds",
            "Time the batch that held a request took to run",
            ["model", "version"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "xrt_inference_batch_size",
            "Rows per batch run (after padding to a shape bucket)",
            ["model", "version"],
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge(
            "xrt_inference_queue_depth",
            "Requests waiting in the model's queue",
            ["model", "version"],
            registry=r,
        )
        self.device_memory = Gauge(
            "xrt_device_memory_allocated_bytes",
            "Bytes held by xpuruntime's allocator",
            ["device"],
            registry=r,
        )

    def model_metrics(self, model: str, version: str) -> ModelMetrics:
        """The per-model children (label lookups done once, not per request)."""
        return ModelMetrics(
            {p: self.requests.labels(model, version, p) for p in PROTOCOLS},
            self.batch_size.labels(model, version),
            self.compute_seconds.labels(model, version),
            self.queue_seconds.labels(model, version),
            self.queue_depth.labels(model, version),
        )

    def render(self, devices: list[str]) -> bytes:
        """The text exposition format, with device memory sampled now."""
        for dev in devices:
            stats = _memory_stats(dev)
            if stats is not None:
                self.device_memory.labels(dev).set(stats)
        return generate_latest(self.registry)


def _memory_stats(device: str) -> int | None:
    """Bytes allocated on ``device`` by xpuruntime's caching allocator (None when not reported)."""
    import xpuruntime as xrt

    try:
        stats: Any = xrt.memory.memory_stats(device)
    except xrt.XpuRuntimeError:  # a device this build has no allocator for (its plugin is absent)
        return None
    return int(stats.allocated_bytes)


__all__ = ["CONTENT_TYPE", "ModelMetrics", "ServerMetrics"]
