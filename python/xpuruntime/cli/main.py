"""The ``xpuruntime`` command line.

    xpuruntime devices                      devices and engines on this machine
    xpuruntime run [MODEL]                  run once (default: the bundled demo model)
    xpuruntime explain MODEL                the plan and every decision behind it
    xpuruntime bench MODEL                  warm-up, p50/p90/p99 latency, throughput
    xpuruntime policy validate FILE         check a KernelPolicy/ExecutionPolicy file
    xpuruntime policy check MODEL POLICY    a partition against the policy's budgets (exit 1 on violation)
    xpuruntime compare MODEL --engines ...  the same inputs through several engines
    xpuruntime serve --model-repository DIR the Open Inference Protocol over REST and gRPC

Inputs are random (floats standard normal, integers in [0, --int-high), bools random)
with symbolic dimensions from ``--dim name=value`` (default 1), or read from an
``.npz`` with ``--inputs``. Tables are drawn with rich on a terminal and printed as
plain text otherwise (pipes, files, CI logs).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


# ------------------------------------------------------------------ output
def _tty() -> bool:
    return sys.stdout.isatty()


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A table: rich on a terminal, aligned plain text otherwise."""
    cells = [[str(c) for c in r] for r in rows]
    if _tty():
        from rich.console import Console
        from rich.table import Table

        t = Table(title=title)
        for c in columns:
            t.add_column(str(c))
        for r in cells:
            t.add_row(*r)
        Console().print(t)
        return
    widths = [max([len(str(c))] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    print(title)
    print("  ".join(str(c).ljust(w) for c, w in zip(columns, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())


# ------------------------------------------------------------------ helpers
def _model_arg(model: str | None) -> str:
    if model:
        return model
    from ..models import demo_model_path

    return str(demo_model_path())


def _dims(items: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not value.strip().isdigit():
            raise SystemExit(f"--dim expects NAME=VALUE with an integer value, got {item!r}")
        out[name.strip()] = int(value)
    return out


def _policies(args: argparse.Namespace) -> tuple[Any, Any]:
    kp = ep = None
    if getattr(args, "policy", None):
        from ..policies import KernelPolicy

        kp = KernelPolicy.load(args.policy)
    if getattr(args, "exec_policy", None):
        from ..policies import ExecutionPolicy

        ep = ExecutionPolicy.load(args.exec_policy)
    if getattr(args, "threads", None):
        from ..policies import ExecutionPolicy

        ep = ep or ExecutionPolicy()
        ep.threads = args.threads
    return kp, ep


def _session(args: argparse.Namespace) -> Any:
    from ..inference import InferenceSession

    kp, ep = _policies(args)
    return InferenceSession(
        _model_arg(args.model), device=args.device, engine=args.engine, kernel_policy=kp, exec_policy=ep
    )


def _inputs(sess: Any, args: argparse.Namespace) -> dict[str, np.ndarray]:
    if args.inputs:
        with np.load(args.inputs) as z:
            return {k: z[k] for k in z.files}
    from .compare import make_inputs

    return make_inputs(sess.get_inputs(), _dims(args.dim), args.seed, args.int_high)


def _summary(a: np.ndarray) -> list[str]:
    a = np.asarray(a)
    if a.size and a.dtype.kind in "fiub":
        f = a.astype(np.float64)
        return [
            f"{a.dtype}{list(a.shape)}",
            f"{f.min():.4g}",
            f"{f.max():.4g}",
            f"{f.mean():.4g}",
            f"{f.std():.4g}",
        ]
    return [f"{a.dtype}{list(a.shape)}", "-", "-", "-", "-"]


def _decision_rows(sess: Any) -> list[list[str]]:
    rows = []
    for d in sess.explain():
        shapes = ", ".join(f"{t}{list(s)}" for t, s in zip(d.dtypes, d.shapes)) if d.shapes else "-"
        rejected = "; ".join(f"{c.kernel}: {c.reason_code}" for c in d.candidates if c.verdict != "supported")
        rows.append([d.op, d.node or "-", d.chosen or "-", d.rule, shapes, rejected or "-"])
    return rows


def _print_decisions(sess: Any) -> None:
    print_table("decisions", ["op", "node", "chosen", "rule", "inputs", "rejected"], _decision_rows(sess))


# ------------------------------------------------------------------ commands
def cmd_devices(args: argparse.Namespace) -> int:
    from ..engines.registry import engine_table
    from ..runtime.device import get_all_devices

    rows = []
    for d in get_all_devices():
        info = d.info
        rows.append(
            [
                str(getattr(info, "device_type", d.type)).split(".")[-1].lower(),
                d.id,
                d.name,
                f"{d.total_memory_gb:.1f} GiB",
                getattr(info, "sm_count", "-"),
            ]
        )
    print_table("devices", ["type", "id", "name", "memory", "cores/SMs"], rows)
    erows = []
    for name, av in engine_table():
        erows.append(
            [
                name,
                "yes" if av.available else "no",
                ",".join(av.devices) or "-",
                av.reason or "-",
                av.install_hint or "-",
            ]
        )
    print_table("engines", ["engine", "available", "devices", "reason", "install"], erows)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    sess = _session(args)
    feeds = _inputs(sess, args)
    t0 = time.perf_counter()
    outs = sess.run(feeds)
    first = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    sess.run(feeds)
    second = (time.perf_counter() - t0) * 1e3
    print(f"model: {_model_arg(args.model)}  engine: {sess.engine}  device: {sess.device}")
    print_table(
        "outputs",
        ["name", "array", "min", "max", "mean", "std"],
        [[k, *_summary(v)] for k, v in outs.items()],
    )
    print(f"latency: first run {first:.2f} ms, second run {second:.2f} ms")
    _print_decisions(sess)
    if args.save_outputs:
        np.savez(args.save_outputs, **{k: np.asarray(v) for k, v in outs.items()})
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    sess = _session(args)
    if sess.plan is None:  # symbolic dims: compile a specialization first
        sess.run(_inputs(sess, args))
    if sess.plan is not None:
        print(sess.plan.summary())
    _print_decisions(sess)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    sess = _session(args)
    feeds = _inputs(sess, args)
    for _ in range(max(args.warmup, 1)):
        sess.run(feeds)
    times: list[float] = []

    def one() -> None:
        t0 = time.perf_counter()
        sess.run(feeds)
        times.append((time.perf_counter() - t0) * 1e3)

    if _tty():
        from rich.progress import Progress

        with Progress(transient=True) as prog:
            task = prog.add_task("benchmarking", total=args.iterations)
            for _ in range(args.iterations):
                one()
                prog.advance(task)
    else:
        step = max(1, args.iterations // 10)
        for i in range(args.iterations):
            one()
            if (i + 1) % step == 0:
                print(f"  {i + 1}/{args.iterations}", file=sys.stderr)
    arr = np.array(times)
    batch = max((v.shape[0] for v in feeds.values() if getattr(v, "ndim", 0) > 0), default=1)
    result = {
        "model": _model_arg(args.model),
        "engine": sess.engine,
        "device": sess.device,
        "iterations": args.iterations,
        "p50_ms": float(np.percentile(arr, 50)),
        "p90_ms": float(np.percentile(arr, 90)),
        "p99_ms": float(np.percentile(arr, 99)),
        "mean_ms": float(arr.mean()),
        "throughput_per_s": float(1e3 * batch / arr.mean()),
    }
    print_table(
        "latency",
        ["engine", "device", "p50 ms", "p90 ms", "p99 ms", "mean ms", "items/s"],
        [
            [
                sess.engine,
                sess.device,
                f"{result['p50_ms']:.3f}",
                f"{result['p90_ms']:.3f}",
                f"{result['p99_ms']:.3f}",
                f"{result['mean_ms']:.3f}",
                f"{result['throughput_per_s']:.1f}",
            ]
        ],
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


def cmd_policy_validate(args: argparse.Namespace) -> int:
    from .. import _core
    from ..policies import ExecutionPolicy, KernelPolicy

    text = Path(args.file).read_text()
    kind = args.kind
    if kind == "auto":
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        keys = set(data) if isinstance(data, dict) else set()
        kind = "exec" if keys & {"target", "precision", "static_shape", "allow_fallback"} else "kernel"
    try:
        if kind == "kernel":
            pol: Any = KernelPolicy.load(args.file)
        else:
            pol = ExecutionPolicy.load(args.file)
    except _core.XpuRuntimeError as exc:
        print(f"invalid {kind} policy {args.file}: {exc}", file=sys.stderr)
        return 1
    fp = getattr(pol, "fingerprint", "-")
    fp = fp() if callable(fp) else fp
    print(
        f"ok: {args.file} is a valid {'KernelPolicy' if kind == 'kernel' else 'ExecutionPolicy'} "
        f"(fingerprint {fp})"
    )
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        from ..serving import InferenceServer
    except ImportError as exc:
        print(
            f"error: xpuruntime serve needs the serve extra ({exc}); install with: pip install xpuruntime[serve]",
            file=sys.stderr,
        )
        return 2
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


# ------------------------------------------------------------------ parser
def _common(p: argparse.ArgumentParser, model_required: bool) -> None:
    if model_required:
        p.add_argument("model", help="path to an .onnx model or a saved plan")
    else:
        p.add_argument("model", nargs="?", default=None, help="model (default: the bundled demo model)")
    p.add_argument("--engine", default="auto", help="engine name or 'auto' (default: the registry's choice)")
    p.add_argument("--device", default="auto", help="device: cpu, cuda[:N], npu, gpu or auto (default auto)")
    p.add_argument("--policy", default=None, help="KernelPolicy file (JSON or YAML)")
    p.add_argument("--exec-policy", default=None, help="ExecutionPolicy file (JSON or YAML)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (ExecutionPolicy.threads)")
    p.add_argument("--inputs", default=None, help=".npz file with the inputs (default: random)")
    p.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="value of a symbolic dimension (repeatable; default 1)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--int-high", type=int, default=10, help="integer inputs are drawn from [0, INT_HIGH)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xpuruntime", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    from . import orchestrate
    p = sub.add_parser("devices", help="devices and engines on this machine")
    p.set_defaults(func=cmd_devices)
    p = sub.add_parser("run", help="run a model once and show outputs, latency and decisions")
    _common(p, model_required=False)
    p.add_argument("--save-outputs", default=None, metavar="NPZ")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("explain", help="show the compiled plan and every decision")
    _common(p, model_required=True)
    p.set_defaults(func=cmd_explain)
    orchestrate.add_explain_options(p, print_table)
    p = sub.add_parser("bench", help="latency percentiles and throughput")
    _common(p, model_required=True)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iterations", type=int, default=50)
    p.add_argument("--json", default=None, metavar="PATH", help="also write the result as JSON")
    p.set_defaults(func=cmd_bench)
    p = sub.add_parser("policy", help="policy files")
    psub = p.add_subparsers(dest="policy_command", required=True)
    v = psub.add_parser("validate", help="check a policy file (exit 1 with the reason when invalid)")
    v.add_argument("file")
    v.add_argument("--kind", choices=["auto", "kernel", "exec"], default="auto")
    v.set_defaults(func=cmd_policy_validate)
    orchestrate.add_policy_check(psub)
    from . import compare

    compare.add_parser(sub)
    p = sub.add_parser("serve", help="serve a model repository over the Open Inference Protocol")
    p.add_argument("--model-repository", required=True, metavar="DIR", help="one folder per model")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0 for every interface)")
    p.add_argument("--http-port", type=int, default=8000, help="REST port (0: any free port, -1: no REST)")
    p.add_argument("--grpc-port", type=int, default=8001, help="gRPC port (0: any free port, -1: no gRPC)")
    p.add_argument("--max-request-bytes", type=int, default=64 << 20, help="largest request body accepted")
    p.add_argument("--max-inflight", type=int, default=256, help="unbatched requests per model before 503")
    p.add_argument("--threads", type=int, default=16, help="worker threads (gRPC handlers, unbatched runs)")
    p.add_argument("--load", action="append", default=[], metavar="MODEL", help="load only these models")
    p.add_argument("--grace", type=float, default=30.0, help="seconds in-flight requests get at shutdown")
    p.set_defaults(func=cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``xpuruntime`` console script."""
    from .. import _core

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except _core.XpuRuntimeError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
