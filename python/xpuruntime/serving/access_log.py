"""One access-log line per request (logger ``xpuruntime.serving.access``, level DEBUG).

    REST POST /v2/models/demo/infer demo 200 412us
    gRPC ModelInfer demo OK 388us

REST requests are logged by an ASGI middleware, gRPC calls by a server interceptor;
both cost one ``isEnabledFor`` check when the logger is quieter than DEBUG. DEBUG, not
INFO: a line per request costs throughput, and a server whose stderr nobody reads (a
pipe) would block once the pipe is full; ``xpuruntime serve --log-level debug`` turns
it on.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

log = logging.getLogger("xpuruntime.serving.access")
_MODEL = re.compile(r"/v2/(?:models|repository/models)/([^/]+)")


class AccessLogMiddleware:
    """ASGI middleware: method, path, model, status and microseconds of every HTTP request."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not log.isEnabledFor(logging.DEBUG):
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = [0]

        async def send_and_note(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            path = scope.get("path", "")
            m = _MODEL.match(path)
            log.debug(
                "REST %s %s %s %d %dus",
                scope.get("method", "-"),
                path,
                m.group(1) if m else "-",
                status[0],
                int((time.perf_counter() - t0) * 1e6),
            )


def grpc_interceptor() -> Any:
    """A grpc.ServerInterceptor logging method, model, status code and microseconds of each call."""
    import grpc

    class _Interceptor(grpc.ServerInterceptor):
        def intercept_service(self, continuation: Any, details: Any) -> Any:
            handler = continuation(details)
            if handler is None or handler.unary_unary is None or not log.isEnabledFor(logging.DEBUG):
                return handler
            method = details.method.rsplit("/", 1)[-1]
            inner = handler.unary_unary

            def logged(request: Any, context: Any) -> Any:
                t0 = time.perf_counter()
                code = "OK"
                try:
                    return inner(request, context)
                except BaseException:
                    c = context.code() if hasattr(context, "code") else None
                    code = c.name if c is not None else "UNKNOWN"
                    raise
                finally:
                    model = getattr(request, "model_name", "") or getattr(request, "name", "") or "-"
                    log.debug(
                        "gRPC %s %s %s %dus", method, model, code, int((time.perf_counter() - t0) * 1e6)
                    )

            return grpc.unary_unary_rpc_method_handler(
                logged,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )

    return _Interceptor()


__all__ = ["AccessLogMiddleware", "grpc_interceptor"]
