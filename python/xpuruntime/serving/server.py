"""InferenceServer: the model repository behind REST (uvicorn) and gRPC (grpcio) at once.

    from xpuruntime.serving import InferenceServer
    server = InferenceServer("models/", http_port=8000, grpc_port=8001).start()
    ...
    server.stop()                      # graceful: in-flight and queued requests finish

``serve_forever`` is what ``xpuruntime serve`` runs: the first SIGINT/SIGTERM stops
gracefully (no new connections, running and queued requests finish, then exit), a
second one exits at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from .metrics import ServerMetrics
from .protocol import ServingError
from .repository import ModelRepository

EXTENSIONS = [
    "model_repository",
    "binary_tensor_data",
    "explain",
    "metrics",
    "model_configuration",
    "statistics",
]


class InferenceServer:
    """An Open Inference Protocol server over a model repository.

    Args:
        model_repository: the repository folder (see :mod:`xpuruntime.serving.repository`).
        host: address both front ends listen on.
        http_port: REST port (0: any free port; ``None``: no REST front end).
        grpc_port: gRPC port (0: any free port; ``None``: no gRPC front end).
        max_request_bytes: largest request body accepted (REST 413, gRPC RESOURCE_EXHAUSTED).
        max_inflight: unbatched requests running or waiting per model version before 503.
        threads: worker threads for gRPC handlers and unbatched REST runs.
        load_models: load every model at start (True) or these names only.
        instance: this server's name in every response's ``server_instance`` parameter
            (default ``host:pid``; a Ray Serve replica passes its replica id).

    Thread safety: ``start``/``stop`` from one thread; everything else from any.
    """

    def __init__(
        self,
        model_repository: str | Path,
        host: str = "127.0.0.1",
        http_port: int | None = 8000,
        grpc_port: int | None = 8001,
        *,
        max_request_bytes: int = 64 << 20,
        max_inflight: int = 256,
        threads: int = 16,
        load_models: bool | list[str] = True,
        instance: str | None = None,
    ) -> None:
        self.instance = instance or f"{socket.gethostname()}:{os.getpid()}"
        self.metrics = ServerMetrics()
        self.repository = ModelRepository(
            model_repository, self.metrics, max_inflight, provenance={"server_instance": self.instance}
        )
        self.host = host
        self.http_port = http_port
        self.grpc_port = grpc_port
        self.max_request_bytes = int(max_request_bytes)
        self.executor = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="xrt-serve")
        self._threads = threads
        self._load_models = load_models
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._started = False
        self._uvicorn: Any = None
        self._http_thread: threading.Thread | None = None
        self._grpc: Any = None

    # ------------------------------------------------------------------ state
    def ready(self) -> bool:
        """Started and not stopping (each model's own readiness is separate)."""
        return self._started and not self._stopping.is_set()

    def server_metadata(self) -> dict[str, Any]:
        """The protocol's server metadata."""
        import xpuruntime

        return {"name": "xpuruntime", "version": xpuruntime.__version__, "extensions": list(EXTENSIONS)}

    # ------------------------------------------------------------------ start / stop
    def start(self) -> InferenceServer:
        """Load the models, then open the front ends; returns once both accept requests."""
        if self._load_models is True:
            self.repository.load_all()
        elif self._load_models:
            for name in self._load_models:
                # A failure is recorded in the repository index with its reason.
                with contextlib.suppress(ServingError):
                    self.repository.load(name)
        if self.grpc_port is not None:
            self._start_grpc()
        if self.http_port is not None:
            self._start_http()
        self._started = True
        return self

    def _start_grpc(self) -> None:
        import grpc

        from .access_log import grpc_interceptor
        from .grpc_service import InferenceServicer, handler
        from .triton import grpc_handler

        server = grpc.server(
            concurrent.futures.ThreadPoolExecutor(self._threads, thread_name_prefix="xrt-grpc"),
            options=[
                ("grpc.max_receive_message_length", self.max_request_bytes),
                ("grpc.max_send_message_length", -1),
                ("grpc.so_reuseport", 0),
            ],
            interceptors=[grpc_interceptor()],
        )
        server.add_generic_rpc_handlers((handler(InferenceServicer(self)), grpc_handler(self)))
        port = server.add_insecure_port(f"{self.host}:{self.grpc_port}")
        if port == 0:
            raise OSError(f"gRPC could not listen on {self.host}:{self.grpc_port} (port in use?)")
        server.start()
        self.grpc_port = port
        self._grpc = server

    def _start_http(self) -> None:
        import uvicorn

        from .rest import build_app

        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, int(self.http_port or 0)))
        self.http_port = sock.getsockname()[1]
        config = uvicorn.Config(
            build_app(self),
            log_level="warning",
            access_log=False,
            lifespan="off",
            # No X-Forwarded-* rewriting: nothing here reads the client's address, and
            # the middleware would wrap every request.
            proxy_headers=False,
            timeout_graceful_shutdown=30,
        )
        self._uvicorn = uvicorn.Server(config)
        started = threading.Event()

        def run() -> None:
            loop = _new_event_loop()
            asyncio.set_event_loop(loop)

            async def main() -> None:
                task = asyncio.ensure_future(self._uvicorn.serve(sockets=[sock]))
                while not self._uvicorn.started and not task.done():
                    await asyncio.sleep(0.01)
                started.set()
                await task

            loop.run_until_complete(main())
            loop.close()

        self._http_thread = threading.Thread(target=run, name="xrt-http", daemon=True)
        self._http_thread.start()
        if not started.wait(30) or not self._uvicorn.started:
            raise OSError(f"the REST server did not start on {self.host}:{self.http_port}")

    def stop(self, grace: float = 30.0) -> None:
        """Graceful stop: refuse new work, let running and queued requests finish (up to ``grace`` s)."""
        if self._stopped.is_set():
            return
        self._stopping.set()
        if self._uvicorn is not None:
            self._uvicorn.config.timeout_graceful_shutdown = grace
            self._uvicorn.should_exit = True
        grpc_done = self._grpc.stop(grace) if self._grpc is not None else None
        if self._http_thread is not None:
            self._http_thread.join(grace + 5)
        if grpc_done is not None:
            grpc_done.wait(grace + 5)
        self.repository.close()
        self.executor.shutdown(wait=True)
        self._stopped.set()

    def stop_now(self) -> None:
        """Stop at once: queued requests fail with UNAVAILABLE, connections close."""
        self._stopping.set()
        for s in self.repository.schedulers():
            s.close(drain=False)
        if self._uvicorn is not None:
            self._uvicorn.force_exit = True
            self._uvicorn.should_exit = True
        if self._grpc is not None:
            self._grpc.stop(0)
        self._stopped.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server has stopped; False on timeout."""
        return self._stopped.wait(timeout)

    def serve_forever(self, grace: float = 30.0) -> None:
        """Start, then serve until SIGINT/SIGTERM (first: graceful stop; second: exit at once)."""
        signals = [0]

        def on_signal(signum: int, frame: Any) -> None:
            signals[0] += 1
            if signals[0] == 1:
                print(
                    f"xpuruntime serve: {signal.Signals(signum).name}: finishing in-flight requests "
                    "(send it again to stop at once)",
                    file=sys.stderr,
                    flush=True,
                )
                threading.Thread(target=self.stop, args=(grace,), name="xrt-stop", daemon=True).start()
            else:
                print("xpuruntime serve: stopping at once", file=sys.stderr, flush=True)
                self.stop_now()
                sys.stderr.flush()
                os._exit(130)

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.start()
            for e in self.repository.index():
                state = e["state"] + (f" ({e['reason']})" if e["reason"] else "")
                print(
                    f"xpuruntime serve: model {e['name']} {e.get('version', '-')}: {state}", file=sys.stderr
                )
            print(
                f"xpuruntime serve: REST on {self.host}:{self.http_port}, gRPC on {self.host}:{self.grpc_port}",
                file=sys.stderr,
                flush=True,
            )
            while not self._stopped.wait(0.5):
                pass
        finally:
            for s, h in previous.items():
                signal.signal(s, h)

    def __enter__(self) -> InferenceServer:  # noqa: PYI034
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop when installed (uvicorn[standard]): the faster one; else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()
