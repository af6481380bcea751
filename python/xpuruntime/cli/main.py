"""The xpuruntime command line.

    xpuruntime devices                      devices and engines on this machine
    xpuruntime run [MODEL]                  run once (default: the bundled demo model)
    xpuruntime explain [MODEL]              the plan and the decisions behind it
    xpuruntime bench [MODEL]                build/first-run time, latency statistics, throughput
    xpuruntime policy validate FILE         check a KernelPolicy/ExecutionPolicy file
    xpuruntime compare [MODEL] --engines .. the same inputs through several engines
    xpuruntime policy check MODEL POLICY    a partition against the policy's budgets (exit 1 on violation)
    xpuruntime serve --model-repository DIR the Open Inference Protocol over REST and gRPC

MODEL defaults to the bundled demo model (input 'image' [batch, 3, 32, 32]). Inputs are
random (floats standard normal, integers in [0, --int-high), bools random) with
symbolic dimensions from --dim NAME=VALUE (default 1), or read from an .npz file with
--inputs. Tables are drawn with rich on a terminal and printed as plain text otherwise
(pipes, files, CI logs). A user mistake ends in one line on stderr and exit status 2;
--debug (anywhere on the line) shows the traceback instead.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .args import (
    dim_assignment,
    non_negative_int,
    port,
    positive_float,
    positive_int,
    resolve_policies,
)
from .decisions import MODES, print_decisions
from .errors import ArgumentParser, CliError, report
from .output import model_label, print_table

# Kept importable from here (earlier releases defined it in this module).
__all__ = [
    "build_parser",
    "dim_assignment",
    "main",
    "non_negative_int",
    "port",
    "positive_float",
    "positive_int",
    "print_table",
    "resolve_policies",
]


# ------------------------------------------------------------------ helpers
def _model_arg(model: str | None) -> str:
    if model:
        return model
    from ..models import demo_model_path

    return str(demo_model_path())


def _check_file(path: str, flag: str) -> None:
    p = Path(path)
    if not p.exists():
        raise CliError(f"{flag} {path!r} does not exist; check the path")
    if p.is_dir():
        raise CliError(f"{flag} {path!r} is a folder; pass a file")


def make_session(args: argparse.Namespace) -> Any:
    """The InferenceSession the flags describe (model, engine, device, policies)."""
    from ..inference import InferenceSession

    args.model = _model_arg(args.model)
    _check_file(args.model, "model")
    kp, ep = resolve_policies(args)
    from .lock_cache import lock_kwargs, lock_policies

    locked = lock_kwargs(args)
    if locked.get("lock"):
        kp, ep = lock_policies(locked["lock"], kp, ep)  # the lock's, unless the flags give them
    return InferenceSession(
        args.model, device=args.device, engine=args.engine, kernel_policy=kp, exec_policy=ep, **locked
    )


def symbolic_dims(sess: Any) -> list[str]:
    """Names of the symbolic dimensions of the session's inputs, in order of appearance."""
    names: list[str] = []
    for info in sess.get_inputs():
        for d in info.shape:
            if not (isinstance(d, int) and d >= 0) and str(d) not in names:
                names.append(str(d))
    return names


def make_inputs(sess: Any, args: argparse.Namespace) -> dict[str, np.ndarray]:
    """Inputs from --inputs, else random ones with --dim/--batch applied (unknown names refused)."""
    if args.inputs:
        _check_file(args.inputs, "--inputs")
        try:
            with np.load(args.inputs, allow_pickle=False) as z:
                feeds = {k: z[k] for k in z.files}
        except (ValueError, OSError) as exc:
            raise CliError(
                f"--inputs {args.inputs!r} is not an .npz file of arrays ({exc}); write one with "
                "numpy.savez(path, NAME=array, ...)"
            ) from None
        expected = [i.name for i in sess.get_inputs()]
        missing = [n for n in expected if n not in feeds]
        if missing:
            raise CliError(
                f"--inputs {args.inputs!r} has no array {missing[0]!r}; the model's inputs are "
                f"{', '.join(expected)} and the file holds {', '.join(feeds) or 'nothing'}"
            )
        return {n: feeds[n] for n in expected}
    from .compare import make_inputs as random_inputs

    names = symbolic_dims(sess)
    dims = dict(getattr(args, "dim", None) or [])
    for name in dims:
        if name not in names:
            known = ", ".join(names) if names else "none (every dimension is fixed)"
            raise CliError(
                f"--dim {name}=...: the model has no symbolic dimension {name!r}; its symbolic dimensions: {known}"
            )
    batch = getattr(args, "batch", None)
    if batch is not None:
        leading = {str(i.shape[0]) for i in sess.get_inputs() if i.shape and not isinstance(i.shape[0], int)}
        if not leading:
            raise CliError(
                "--batch: no input has a symbolic first dimension (the batch size is fixed in the model); "
                "drop --batch or export the model with a dynamic batch dimension"
            )
        for name in leading:
            dims.setdefault(name, batch)
    return random_inputs(sess.get_inputs(), dims, args.seed, args.int_high)


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
                "-" if av.available else (av.install_hint or "-"),
            ]
        )
    print_table("engines", ["engine", "available", "devices", "reason", "install"], erows)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    sess = make_session(args)
    if args.save_outputs:  # checked before the model runs
        target = Path(args.save_outputs)
        if target.suffix != ".npz" or target.is_dir() or not target.parent.is_dir():
            raise CliError(
                f"--save-outputs {args.save_outputs!r} must name an .npz file in an existing folder "
                "(e.g. outputs.npz)"
            )
    feeds = make_inputs(sess, args)
    t0 = time.perf_counter()
    outs = sess.run(feeds)
    first = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    sess.run(feeds)
    second = (time.perf_counter() - t0) * 1e3
    print(f"model: {model_label(args.model)}  engine: {sess.engine}  device: {sess.device}")
    print_table(
        "outputs",
        ["name", "array", "min", "max", "mean", "std"],
        [[k, *_summary(v)] for k, v in outs.items()],
    )
    print(f"latency: first run {first:.2f} ms, second run {second:.2f} ms")
    print_decisions(sess, args.decisions, args.verbose)
    if args.save_outputs:
        np.savez(args.save_outputs, **{k: np.asarray(v) for k, v in outs.items()})
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    if args.dry_run or args.target:
        return _explain_dry_run(args)
    sess = make_session(args)
    if sess.plan is None:  # symbolic dims: compile a specialization first
        sess.run(make_inputs(sess, args))
    if sess.plan is not None:
        print(sess.plan.summary())
    print_decisions(sess, args.decisions, args.verbose)
    return 0


def _explain_dry_run(args: argparse.Namespace) -> int:
    """``explain --dry-run [--target sm_90]``: the native plan for a device this machine
    may lack, compiled offline (passes, fusions, kernel choices; nothing prepared)."""
    from ..engines.native.preview import preview_plan

    if args.engine not in ("auto", "native"):
        raise SystemExit(f"error: --dry-run previews the native engine's plan, not --engine {args.engine}")
    device = "cuda" if args.device in ("auto", "gpu") else args.device.split(":")[0]
    dims = dict(args.dim)
    kp, ep = resolve_policies(args)
    pv = preview_plan(
        _model_arg(args.model),
        device=device,
        target=args.target or "",
        kernel_policy=kp,
        exec_policy=ep,
        dims=dims,
    )
    print(pv.summary())
    counts = ", ".join(f"{k} {n}" for k, n in pv.kernel_counts().most_common())
    print(f"{pv.launches()} kernel launches on {device} ({pv.target}): {counts}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_bench

    return run_bench(args, make_session, make_inputs)


def cmd_serve(args: argparse.Namespace) -> int:
    from .serve import run_serve

    return run_serve(args)


# ------------------------------------------------------------------ parser
def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model", nargs="?", default=None, help="an .onnx model or a saved plan (default: the bundled demo)"
    )
    p.add_argument("--engine", default="auto", help="engine name, or auto for the registry's choice")
    p.add_argument("--device", default="auto", help="cpu, cuda[:N], npu, gpu or auto")
    p.add_argument("--policy", default=None, metavar="FILE", help="KernelPolicy file (JSON or YAML)")
    p.add_argument("--exec-policy", default=None, metavar="FILE", help="ExecutionPolicy file (JSON or YAML)")
    p.add_argument("--threads", type=positive_int, default=None, help="CPU threads (ExecutionPolicy.threads)")
    p.add_argument(
        "--inputs", default=None, metavar="NPZ", help=".npz file with the inputs (default: random)"
    )
    p.add_argument(
        "--dim",
        action="append",
        type=dim_assignment,
        default=[],
        metavar="NAME=VALUE",
        help="value of a symbolic dimension (repeatable; unnamed ones are 1)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument(
        "--int-high", type=positive_int, default=10, help="integer inputs are drawn from [0, INT_HIGH)"
    )


def _decision_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--decisions",
        choices=MODES,
        default="chosen",
        help="chosen: a compact table of chosen kernels and rules; all: every decision and its "
        "rejected candidates; none",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="also show candidates for device kinds absent from this machine",
    )


def _compare_parser(sub: Any) -> None:
    """compare (cli/compare.py), with MODEL defaulting to the demo like the other commands."""
    from . import compare

    p = compare.add_parser(sub)
    for action in p._actions:
        if action.dest == "model" and not action.option_strings:
            action.nargs = "?"
            action.default = None
            action.help = "an .onnx model (default: the bundled demo)"
    run = p.get_default("func")

    def run_with_default_model(args: argparse.Namespace) -> int:
        args.model = _model_arg(args.model)
        _check_file(args.model, "model")
        return int(run(args) or 0)

    p.set_defaults(func=run_with_default_model)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``xpuruntime`` command."""
    import xpuruntime

    parser = ArgumentParser(prog="xpuruntime", description=__doc__)
    parser.add_argument("--version", action="version", version=f"xpuruntime {xpuruntime.__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error (anywhere on the line)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from . import orchestrate

    p = sub.add_parser("devices", help="devices and engines on this machine")
    p.set_defaults(func=cmd_devices)
    p = sub.add_parser("run", help="run a model once: outputs, latency and decisions")
    _common(p)
    _decision_flags(p)
    p.add_argument("--save-outputs", default=None, metavar="NPZ", help="write the outputs to an .npz file")
    from .lock_cache import add_lock_arguments

    add_lock_arguments(p)
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("explain", help="the compiled plan and the decisions behind it")
    _common(p)
    _decision_flags(p)
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="compile the native plan offline (no device needed, nothing prepared) and list what would run",
    )
    p.add_argument(
        "--target", default=None, help="GPU architecture for --dry-run, e.g. sm_90 (implies --dry-run)"
    )
    p.add_argument(
        "--precision", choices=["fp32", "fp16", "bf16"], default=None, help="ExecutionPolicy.precision"
    )
    p.set_defaults(func=cmd_explain)
    orchestrate.add_explain_options(p, print_table)
    p = sub.add_parser("bench", help="build/first-run time, latency statistics and throughput")
    _common(p)
    p.add_argument(
        "--warmup", type=non_negative_int, default=5, help="runs after the first, before measuring"
    )
    p.add_argument(
        "--iterations", type=positive_int, default=None, help="measured runs (default 50 without --duration)"
    )
    p.add_argument("--duration", type=positive_float, default=None, metavar="S", help="measure for S seconds")
    p.add_argument(
        "--batch", type=positive_int, default=None, help="value of the inputs' symbolic first dimension"
    )
    p.add_argument(
        "--precision",
        choices=["fp32", "fp16", "bf16", "int8"],
        default=None,
        help="ExecutionPolicy.precision",
    )
    p.add_argument(
        "--profile", default=None, metavar="TRACE_JSON", help="write a Chrome/Perfetto trace of more runs"
    )
    p.add_argument(
        "--json", default=None, metavar="PATH", help="write figures, raw samples and configuration"
    )
    p.set_defaults(func=cmd_bench)
    from . import policy_cmd

    orchestrate.add_policy_check(policy_cmd.add_parser(sub))
    _compare_parser(sub)
    from . import lock_cache

    lock_cache.add_parsers(sub)
    from .serve import add_parser as add_serve

    add_serve(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``xpuruntime`` console script; returns the exit status."""
    import sys

    args_list = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args_list
    args_list = [a for a in args_list if a != "--debug"]
    parser = build_parser()
    args = parser.parse_args(args_list)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("xpuruntime: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        command = " ".join(filter(None, (getattr(args, "command", ""), getattr(args, "policy_command", ""))))
        return report(exc, command)
