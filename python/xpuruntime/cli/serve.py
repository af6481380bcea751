"""``xpuruntime serve``: the model repository over the Open Inference Protocol (REST and gRPC).

Checked before any model loads, each with a one-line error: the repository is a
folder, and the REST and gRPC ports are free. Logs (stderr, --log-level): model
load/unload and per-bucket warm-up at info, load failures at warning, and with debug
one access-log line per request (protocol, method, model, status, microseconds).
"""

from __future__ import annotations

import argparse
import errno
import logging
import socket
from pathlib import Path
from typing import Any

from .errors import CliError

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def check_repository(path: str) -> None:
    """CliError unless ``path`` is a folder."""
    p = Path(path)
    if not p.exists():
        raise CliError(
            f"--model-repository {path!r} does not exist; pass the folder that holds one subfolder per "
            "model (e.g. models/demo/1/model.onnx)"
        )
    if not p.is_dir():
        raise CliError(
            f"--model-repository {path!r} is a file, not a folder; put the model in "
            f"{p.stem or 'name'}/1/{p.name} under a repository folder and pass that folder"
        )


def check_host(host: str) -> None:
    """CliError unless ``host`` resolves to an address (gRPC would fail later with a log line)."""
    try:
        socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise CliError(
            f"--host {host!r} is not an address of this machine ({getattr(exc, 'strerror', None) or exc}); "
            "use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"
        ) from None


def check_models(repository: str, names: list[str]) -> None:
    """CliError for a --load name that is not a model folder of the repository."""
    from ..serving.protocol import is_model_name

    for name in names:
        if not is_model_name(name):
            raise CliError(
                f"--load {name!r:.80} is not a model name (1 to 128 letters, digits, '_', '.' or '-', "
                "not starting with '.'); pass a folder name of the repository"
            )
        if not (Path(repository) / name).is_dir():
            raise CliError(
                f"--load {name!r}: the repository {repository!r} has no folder {name!r}; "
                "pass the name of one of its model folders"
            )


def check_port(host: str, number: int, flag: str) -> None:
    """CliError when ``host:number`` cannot be bound (in use, or not an address of this machine)."""
    if number <= 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, number))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise CliError(
                    f"port {number} on {host} is in use; pick another with {flag} PORT (0: any free port) "
                    "or stop the process that holds it"
                ) from None
            raise CliError(
                f"cannot listen on {host}:{number} ({exc.strerror or exc}); check --host and {flag}"
            ) from None


def run_serve(args: argparse.Namespace) -> int:
    """Execute a parsed ``serve`` command."""
    try:
        from ..serving import InferenceServer
    except ImportError as exc:
        raise CliError(
            f"xpuruntime serve needs the serve extra ({exc}); install it with: pip install xpuruntime[serve]"
        ) from None
    check_repository(args.model_repository)
    check_host(args.host)
    check_models(args.model_repository, args.load)
    check_port(args.host, args.http_port, "--http-port")
    check_port(args.host, args.grpc_port, "--grpc-port")
    if args.http_port > 0 and args.http_port == args.grpc_port:
        raise CliError(f"--http-port and --grpc-port are both {args.http_port}; give them different ports")
    logging.basicConfig(format=LOG_FORMAT, level=getattr(logging, args.log_level.upper()))
    logging.getLogger("xpuruntime.serving").setLevel(getattr(logging, args.log_level.upper()))
    server = InferenceServer(
        args.model_repository,
        host=args.host,
        http_port=None if args.http_port < 0 else args.http_port,
        grpc_port=None if args.grpc_port < 0 else args.grpc_port,
        max_request_bytes=args.max_request_bytes,
        max_inflight=args.max_inflight,
        threads=args.threads,
        load_models=args.load or True,
    )
    server.serve_forever(grace=args.grace)
    return 0


def add_parser(sub: Any) -> None:
    """Register ``serve`` on the top-level subparsers."""
    from .args import non_negative_float, port, positive_int

    p = sub.add_parser(
        "serve", help="serve a model repository over the Open Inference Protocol", description=__doc__
    )
    p.add_argument("--model-repository", required=True, metavar="DIR", help="one folder per model")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--http-port", type=port, default=8000, help="REST port (0: any free port, -1: no REST)")
    p.add_argument("--grpc-port", type=port, default=8001, help="gRPC port (0: any free port, -1: no gRPC)")
    p.add_argument(
        "--max-request-bytes", type=positive_int, default=64 << 20, help="largest request body accepted"
    )
    p.add_argument(
        "--max-inflight", type=positive_int, default=256, help="unbatched requests per model before 503"
    )
    p.add_argument(
        "--threads", type=positive_int, default=16, help="worker threads (gRPC handlers, unbatched runs)"
    )
    p.add_argument(
        "--load", action="append", default=[], metavar="MODEL", help="load only these models (repeatable)"
    )
    p.add_argument(
        "--grace", type=non_negative_float, default=30.0, help="seconds in-flight requests get at shutdown"
    )
    p.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="info",
        help="info: model load/unload and warm-up per bucket; debug: also one access-log line per request",
    )
    p.set_defaults(func=run_serve)
