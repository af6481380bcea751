"""Scheduling requests onto a :class:`ServedModel`: directly, or through the dynamic batcher.

Dynamic batching (a model config with ``dynamic_batching``): requests wait in a bounded
queue; a worker thread (``instances`` of them) takes the oldest request, waits until the queue holds the
largest bucket's worth of rows or the oldest request has waited ``max_queue_delay_us``,
then runs every queued request that fits (in arrival order) as one batch padded to the
smallest bucket that holds it. Since every bucket's plan was built at load, batches
never compile. A full queue refuses the request at once (HTTP 503 / gRPC
RESOURCE_EXHAUSTED): memory stays bounded and the client can back off.

Without batching each request runs on the calling thread (gRPC's worker, or the REST
server's thread pool); at most ``max_inflight`` run or wait at once. A REST request
for a model whose warm run takes under ``INLINE_RUN_US`` runs on the event loop
itself: handing it to a thread would cost more than running it.

Thread safety: every public method may be called from any thread.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import re
import threading
import time
from typing import Any

from .metrics import ServerMetrics
from .model import ServedModel
from .protocol import (
    InferRequest,
    InferResponse,
    ServingError,
    SharedParameters,
    overloaded,
    select_outputs,
    unavailable,
)
from .triton import ModelStatistics

log = logging.getLogger("xpuruntime.serving")

INLINE_RUN_US = 200.0


class _Pending:
    __slots__ = ("future", "req", "rows", "t_enqueue")

    def __init__(self, req: InferRequest, rows: int) -> None:
        self.req = req
        self.rows = rows
        self.t_enqueue = time.perf_counter()
        self.future: concurrent.futures.Future[InferResponse] = concurrent.futures.Future()


def run_error(model: str, exc: Exception) -> ServingError:
    """A failed run as the protocol's error: what the request's data caused is the client's
    (an index out of range is INVALID_ARGUMENT 400, a request too large for memory
    RESOURCE_EXHAUSTED 400), anything else the server's (INTERNAL 500). C++ source
    locations stay in the server's log, out of the client's message."""
    from .. import _core

    text = _SOURCE_LOCATION.sub("", str(exc)).strip()
    message = f"model '{model}' failed to run: {type(exc).__name__}: {text}"
    if isinstance(exc, (_core.OutOfMemoryError, MemoryError)):
        log.warning("%s", exc)
        return ServingError(
            f"{message}; the request needs more memory than the server has: send a smaller input",
            400,
            "RESOURCE_EXHAUSTED",
        )
    if isinstance(exc, (_core.InvalidArgumentError, _core.UnsupportedOperationError)):
        log.info("%s", exc)
        return ServingError(message, 400, "INVALID_ARGUMENT")
    log.error("model %s failed to run", model, exc_info=exc)
    return ServingError(message, 500, "INTERNAL")


#: " [cpp/src/...cpp:190]" at the end of the runtime's messages (kept for logs and --debug).
_SOURCE_LOCATION = re.compile(r"\s*\[[^\[\]]*\.(?:cpp|cc|h|hpp|cu):\d+\]")


class ModelScheduler:
    """Runs validated requests of one model version, batched or not, with provenance."""

    def __init__(
        self,
        model: ServedModel,
        metrics: ServerMetrics,
        max_inflight: int = 256,
        provenance: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.metrics = metrics
        self._closed = False
        self._inflight = 0
        self._max_inflight = max_inflight
        self._cond = threading.Condition()
        self._queue: collections.deque[_Pending] = collections.deque()
        self._queued_rows = 0
        cfg = model.config.dynamic_batching
        self.batching = cfg is not None
        self._inline = not self.batching and model.warm_run_us < INLINE_RUN_US
        self._delay_s = (cfg.max_queue_delay_us if cfg else 0) / 1e6
        self._max_queue = cfg.max_queue_size if cfg else 0
        self._workers: list[threading.Thread] = []
        self._mm = metrics.model_metrics(model.name, model.version)
        self.stats = ModelStatistics(model.name, model.version)  # Triton's statistics extension
        # Front ends count their requests on these (label children bound once).
        self.request_counters: dict[str, Any] = self._mm.requests
        self._depth = self._mm.depth
        base = {
            "engine": model.engine,
            "device": model.device,
            "policy_fingerprint": model.policy_fingerprint,
            "model_version": model.version,
            **(provenance or {}),
        }
        # Provenance that only depends on the batch size formed, built once per bucket.
        self._shared = {b: SharedParameters({**base, "batch_size": b}) for b in model.buckets or (1,)}
        if self.batching:
            for k in range(model.config.instances):
                t = threading.Thread(
                    target=self._loop, name=f"xrt-batcher-{model.name}-{model.version}-{k}", daemon=True
                )
                t.start()
                self._workers.append(t)

    # ------------------------------------------------------------------ entry points
    def infer(self, req: InferRequest) -> InferResponse:
        """Run ``req`` and wait for its response (blocks the calling thread)."""
        t_arrival = time.perf_counter()
        try:
            return self._infer(req)
        except ServingError:
            self.stats.failure(time.perf_counter() - t_arrival)
            raise

    def _infer(self, req: InferRequest) -> InferResponse:
        rows = self.model.validate(req)
        if self.batching:
            return self._enqueue(req, rows).future.result()
        self._admit()
        try:
            return self._run([req], [rows], [time.perf_counter()])[0]
        finally:
            self._release()

    async def infer_async(self, req: InferRequest, executor: concurrent.futures.Executor) -> InferResponse:
        """Run ``req`` without blocking the event loop (unbatched runs go to ``executor``)."""
        t_arrival = time.perf_counter()
        try:
            return await self._infer_async(req, executor)
        except ServingError:
            self.stats.failure(time.perf_counter() - t_arrival)
            raise

    async def _infer_async(self, req: InferRequest, executor: concurrent.futures.Executor) -> InferResponse:
        rows = self.model.validate(req)
        if self.batching:
            return await asyncio.wrap_future(self._enqueue(req, rows).future)
        self._admit()
        t0 = time.perf_counter()
        try:
            if self._inline:
                return self._run([req], [rows], [t0])[0]
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(executor, lambda: self._run([req], [rows], [t0])[0])
        finally:
            self._release()

    def close(self, drain: bool = True) -> None:
        """Stop taking requests; with ``drain`` queued requests still run, else they fail."""
        with self._cond:
            self._closed = True
            if not drain:
                while self._queue:
                    p = self._queue.popleft()
                    p.future.set_exception(unavailable(f"model '{self.model.name}' is shutting down"))
                self._queued_rows = 0
            self._cond.notify_all()
        for t in self._workers:
            if t is not threading.current_thread():
                t.join()

    def queue_depth(self) -> int:
        """Requests waiting now (batching) or running (direct)."""
        with self._cond:
            return len(self._queue) if self.batching else self._inflight

    # ------------------------------------------------------------------ direct mode
    def _admit(self) -> None:
        with self._cond:
            if self._closed:
                raise unavailable(f"model '{self.model.name}' is unloading or the server is stopping")
            if self._inflight >= self._max_inflight:
                raise overloaded(
                    f"model '{self.model.name}' has {self._inflight} requests in flight (max_inflight "
                    f"{self._max_inflight}); retry later"
                )
            self._inflight += 1

    def _release(self) -> None:
        with self._cond:
            self._inflight -= 1

    # ------------------------------------------------------------------ batching
    def _enqueue(self, req: InferRequest, rows: int) -> _Pending:
        p = _Pending(req, rows)
        with self._cond:
            if self._closed:
                raise unavailable(f"model '{self.model.name}' is unloading or the server is stopping")
            if len(self._queue) >= self._max_queue:
                raise overloaded(
                    f"model '{self.model.name}': the batching queue is full ({self._max_queue} requests, "
                    "max_queue_size); retry later"
                )
            self._queue.append(p)
            self._queued_rows += rows
            self._depth.set(len(self._queue))
            self._cond.notify()
        return p

    def _take(self) -> list[_Pending] | None:
        """The next batch (None when closed and drained). Called by the worker only."""
        full = self.model.buckets[-1]
        with self._cond:
            while True:
                while not self._queue:
                    if self._closed:
                        return None
                    self._cond.wait()
                if self._queued_rows >= full or self._closed:
                    break
                # Another worker may take the oldest request meanwhile: the deadline is
                # always the current oldest request's.
                left = self._queue[0].t_enqueue + self._delay_s - time.perf_counter()
                if left <= 0:
                    break
                self._cond.wait(left)
            batch: list[_Pending] = []
            rows = 0
            while self._queue and rows + self._queue[0].rows <= full:
                p = self._queue.popleft()
                rows += p.rows
                batch.append(p)
            self._queued_rows -= rows
            self._depth.set(len(self._queue))
            return batch

    def _loop(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            # Futures a client abandoned (cancelled) are skipped, not run.
            batch = [p for p in batch if p.future.set_running_or_notify_cancel()]
            if not batch:
                continue
            try:
                results = self._run(
                    [p.req for p in batch], [p.rows for p in batch], [p.t_enqueue for p in batch]
                )
            except ServingError as exc:  # every waiter learns why; the worker keeps serving
                if len(batch) == 1 or exc.grpc_code == "UNAVAILABLE":
                    for p in batch:
                        p.future.set_exception(exc)
                    continue
                # One request's data (an index out of range, a size too large) may be what
                # failed: each runs on its own, so only the requests that fail get an error.
                for p in batch:
                    try:
                        p.future.set_result(self._run([p.req], [p.rows], [p.t_enqueue])[0])
                    except ServingError as own:
                        p.future.set_exception(own)
                continue
            for p, r in zip(batch, results):
                p.future.set_result(r)

    # ------------------------------------------------------------------ running
    def _run(self, reqs: list[InferRequest], rows: list[int], t_enqueue: list[float]) -> list[InferResponse]:
        t0 = time.perf_counter()
        timings: list[float] = []
        try:
            outs = self.model.run_batch(reqs, rows, timings)
        except ServingError:
            raise
        except Exception as exc:
            raise run_error(self.model.name, exc) from exc
        t1 = time.perf_counter()
        compute = t1 - t0
        bucket = self.model.bucket_for(sum(rows)) or 1
        self._mm.observe_batch(bucket, compute, [t0 - t for t in t_enqueue])
        self.stats.observe(list(rows), bucket, t_enqueue, t0, timings, t1)
        shared = self._shared[bucket]
        n = len(reqs)
        compute_us = int(compute * 1e6)
        version = self.model.version
        return [
            InferResponse(
                req.model,
                version,
                select_outputs(out, req.outputs),
                {
                    **shared.values,
                    "batch_requests": n,
                    "queue_time_us": int((t0 - te) * 1e6),
                    "compute_time_us": compute_us,
                },
                req.id,
                shared,
            )
            for req, out, te in zip(reqs, outs, t_enqueue)
        ]
