"""``xpuruntime compare MODEL --engines native,onnxruntime,openvino``.

Runs the same inputs through each engine (``name`` or ``name@device``, e.g.
``onnxruntime@cuda``) and prints, against a reference engine,
the output differences (max abs, max rel, cosine similarity) and each engine's
latency. An engine that cannot build or run gets a row with the reason instead of
stopping the comparison.

Inputs are random (float: standard normal; integers: uniform in [0, --int-high);
bool: random) with symbolic dimensions set by ``--dim name=value`` (default 1), or
read from an ``.npz`` file with ``--inputs``. ``--threads N`` runs every engine with N
CPU threads; ``--atol``/``--rtol`` (or ``--tolerance``) make the exit status 1 when an
output differs from the reference beyond ``atol + rtol * |ref|``.

``--bisect`` finds where two runs part ways: two engines (``--engines a,b``), two
kernel policies (``--policies p1.json,p2.json``) or two precisions
(``--precisions fp32,fp16``); it prints the first node, in topological order, whose
output differs beyond the tolerance, both sides' Decisions for it and the error
figures of its inputs and outputs, holding at most ``--max-memory`` bytes of
intermediates at once (exit 1 when a node diverged).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..inference.metrics import diff_metrics, within
from .errors import CliError

__all__ = ["EngineResult", "compare", "diff_metrics", "format_table", "make_inputs", "within"]


# ------------------------------------------------------------------- metrics
# diff_metrics and within live in xpuruntime.inference.metrics (bisection uses them too).


# --------------------------------------------------------------------- inputs
def _host_memory_bytes() -> int:
    """This machine's physical memory in bytes (0 where the system does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return 0


def make_inputs(
    infos: Sequence[Any], dims: dict[str, int], seed: int, int_high: int
) -> dict[str, np.ndarray]:
    """Random inputs for TensorInfo-like specs; symbolic dims from ``dims`` (else 1)."""
    from ..engines.onnx_model import numpy_dtype

    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    shapes = [
        tuple(d if isinstance(d, int) and d >= 0 else dims.get(str(d), 1) for d in i.shape) for i in infos
    ]
    # Random floats are drawn in float64 first: 8 bytes an element at the peak.
    need = sum(math.prod(s) * max(numpy_dtype(i.dtype).itemsize, 8) for s, i in zip(shapes, infos))
    have = _host_memory_bytes()
    if have and need > have:
        biggest = max(zip(shapes, infos), key=lambda p: math.prod(p[0]))
        raise CliError(
            f"random inputs of these sizes take {need / 2**30:.3g} GiB (input {biggest[1].name!r} is "
            f"{list(biggest[0])}), more than this machine's {have / 2**30:.3g} GiB of memory; lower --batch "
            "or --dim, or pass --inputs"
        )
    for info, shape in zip(infos, shapes):
        dtype = numpy_dtype(info.dtype)
        if dtype.kind == "f" or info.dtype == "bfloat16":
            feeds[info.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[info.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            feeds[info.name] = rng.integers(0, int_high, size=shape).astype(dtype)
    return feeds


# --------------------------------------------------------------------- running
@dataclass
class EngineResult:
    """One engine's row: status, latencies and per-output differences."""

    engine: str
    device: str
    status: str  # "ok" or "error"
    error: str = ""
    latency_ms_median: float | None = None
    latency_ms_p90: float | None = None
    diffs: dict[str, dict[str, float]] = field(default_factory=dict)


def _build(engine: str, model: Any, device: str, exec_policy: Any, extra: dict[str, Any]) -> Any:
    from ..engines import registry
    from ..engines.base import EngineOptions

    _, dev, _ = registry.select_engine(engine, device, exec_policy)
    cls = registry.get_engine_class(engine)
    return cls(model, EngineOptions(device=dev, exec_policy=exec_policy, extra=dict(extra))), dev


def _to_numpy(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    to_np = getattr(value, "numpy", None)
    if callable(to_np):
        return np.asarray(to_np())
    return np.asarray(value)


def compare(
    model: Any,
    engines: Sequence[str],
    *,
    reference: str | None = None,
    device: str = "cpu",
    exec_policy: Any = None,
    inputs: dict[str, np.ndarray] | None = None,
    dims: dict[str, int] | None = None,
    seed: int = 0,
    int_high: int = 10,
    warmup: int = 2,
    iterations: int = 10,
    extra: dict[str, Any] | None = None,
    atol: float | None = None,
    rtol: float | None = None,
) -> tuple[list[EngineResult], dict[str, np.ndarray]]:
    """Run ``inputs`` (or random ones) through every engine; compare with ``reference``.

    With ``atol``/``rtol`` each output's figures also get ``within`` (1.0 when
    ``|out - ref| <= atol + rtol * |ref|`` everywhere, else 0.0). Returns the rows
    (reference first) and the inputs used.
    """
    from ..engines import registry
    from ..engines.onnx_model import load_model, onnx_io

    def spec(text: str) -> tuple[str, str, str]:
        """ "name" or "name@device" → (engine, device, row label)."""
        name, _, dev = text.strip().partition("@")
        canonical = registry.canonical_name(name)
        return canonical, dev or device, f"{canonical}@{dev}" if dev else canonical

    specs = [spec(e) for e in engines]
    ref = spec(reference) if reference else specs[0]
    order = [ref] + [s for s in specs if s[2] != ref[2]]
    ref_name = ref[2]
    src = load_model(model)
    model_arg = model if isinstance(model, (str, bytes, os.PathLike)) else src.proto
    if inputs is None:
        infos, _ = onnx_io(src.proto)
        inputs = make_inputs(infos, dims or {}, seed, int_high)

    outputs: dict[str, dict[str, np.ndarray]] = {}
    rows: list[EngineResult] = []
    for engine_name, engine_device, name in order:
        try:
            # every engine gets the model as the caller gave it (a path keeps external data
            # resolvable for vendors that read files themselves)
            eng, dev = _build(engine_name, model_arg, engine_device, exec_policy, extra or {})
            out = {k: _to_numpy(v) for k, v in eng.run(inputs).items()}
            for _ in range(warmup):
                eng.run(inputs)
            times = []
            for _ in range(max(iterations, 1)):
                t0 = time.perf_counter()
                eng.run(inputs)
                times.append((time.perf_counter() - t0) * 1e3)
            times.sort()
            row = EngineResult(
                name,
                dev,
                "ok",
                latency_ms_median=statistics.median(times),
                latency_ms_p90=times[min(len(times) - 1, int(0.9 * len(times)))],
            )
            outputs[name] = out
        except Exception as exc:  # noqa: BLE001 - one failing engine must not stop the table
            detail = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
            row = EngineResult(name, engine_device, "error", error=f"{type(exc).__name__}: {detail}")
        rows.append(row)

    ref_out = outputs.get(ref_name)
    for row in rows:
        if row.status != "ok" or ref_out is None:
            continue
        for key, ref_val in ref_out.items():
            if key in outputs[row.engine]:
                try:
                    row.diffs[key] = diff_metrics(outputs[row.engine][key], ref_val)
                    if atol is not None or rtol is not None:
                        ok = within(outputs[row.engine][key], ref_val, atol or 0.0, rtol or 0.0)
                        row.diffs[key]["within"] = 1.0 if ok else 0.0
                except ValueError as exc:
                    row.status, row.error = "error", f"output {key!r}: {exc}"
    return rows, inputs


# --------------------------------------------------------------------- output
def format_table(rows: Sequence[EngineResult], reference: str) -> str:
    """Plain-text table: one line per engine and output."""
    header = ["engine", "device", "output", "max_abs", "max_rel", "cosine", "median_ms", "p90_ms", "status"]
    lines = [header]
    for r in rows:
        lat = (
            (f"{r.latency_ms_median:.3f}", f"{r.latency_ms_p90:.3f}")
            if r.latency_ms_median is not None
            else ("-", "-")
        )
        label = r.engine + (" (ref)" if r.engine == reference else "")
        if r.status != "ok":
            lines.append([label, r.device, "-", "-", "-", "-", lat[0], lat[1], r.error[:160]])
            continue
        if not r.diffs:  # the reference engine failed: nothing to compare against
            lines.append([label, r.device, "-", "-", "-", "-", lat[0], lat[1], "ok (no reference output)"])
            continue
        for key, d in r.diffs.items():
            lines.append(
                [
                    label,
                    r.device,
                    key,
                    f"{d['max_abs']:.3e}",
                    f"{d['max_rel']:.3e}",
                    f"{d['cosine']:.6f}",
                    lat[0],
                    lat[1],
                    "ok" if d.get("within", 1.0) else "MISMATCH",
                ]
            )
    widths = [max(len(str(row[i])) for row in lines) for i in range(len(header))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in lines)


def _parse_dims(items: Sequence[str]) -> dict[str, int]:
    dims = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not value.strip().isdigit():
            raise argparse.ArgumentTypeError(f"--dim expects name=value (e.g. batch=2), got {item!r}")
        dims[name.strip()] = int(value)
    return dims


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``compare`` subcommand on an argparse subparsers object."""
    p = subparsers.add_parser(
        "compare",
        help="run one model through several engines and compare outputs and latency",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configure(p)
    p.set_defaults(func=run_from_args)
    return p


def configure(p: argparse.ArgumentParser) -> None:
    """Add the compare arguments to ``p``."""
    p.add_argument("model", help="path to an .onnx model")
    p.add_argument(
        "--engines",
        default=None,
        help="comma-separated engine names, e.g. native,onnxruntime,openvino (default: native)",
    )
    p.add_argument(
        "--reference", default=None, help="engine whose outputs are the reference (default: the first)"
    )
    p.add_argument("--device", default="cpu", help="device for every engine (default cpu)")
    p.add_argument(
        "--precision",
        default=None,
        choices=["fp32", "fp16", "bf16", "int8"],
        help="ExecutionPolicy precision",
    )
    p.add_argument(
        "--policies",
        default=None,
        metavar="P1,P2",
        help="--bisect: two KernelPolicy files ('default' for none) whose runs are compared",
    )
    p.add_argument(
        "--precisions", default=None, metavar="A,B", help="--bisect: two precisions, e.g. fp32,fp16"
    )
    from .args import non_negative_float, positive_int

    p.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="CPU threads of every engine (ExecutionPolicy.threads)",
    )
    p.add_argument(
        "--atol",
        type=non_negative_float,
        default=None,
        help="absolute tolerance; with --rtol, exit 1 when an output exceeds it",
    )
    p.add_argument(
        "--rtol",
        type=non_negative_float,
        default=None,
        help="relative tolerance (|a-b| <= atol + rtol*|ref|)",
    )
    p.add_argument(
        "--tolerance",
        type=non_negative_float,
        default=None,
        help="sets --atol and --rtol not given otherwise",
    )
    p.add_argument(
        "--bisect",
        action="store_true",
        help="find the first node whose output differs beyond the tolerance between two engines, policies or "
        "precisions",
    )
    p.add_argument(
        "--max-memory",
        type=_bytes,
        default=256 << 20,
        metavar="BYTES",
        help="--bisect: most bytes of intermediates held at once, both sides together (default 256M; K/M/G)",
    )
    p.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="value of a symbolic dimension (repeatable)",
    )
    p.add_argument("--inputs", default=None, help=".npz file with the inputs (default: random)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--int-high", type=int, default=10, help="integer inputs are drawn from [0, INT_HIGH)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--json", default=None, metavar="PATH", help="also write the rows as JSON")


def _bytes(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    mult = units.get(t[-1:], 1)
    num = t[:-1] if t[-1:] in units else t
    try:
        value = int(float(num) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a byte count such as 64M or 1073741824, got {text!r}"
        ) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"the byte count must be positive, got {text!r}")
    return value


def _exec_policy(precision: str | None, threads: int | None) -> Any:
    if not precision and not threads:
        return None
    from ..policies import ExecutionPolicy

    ep = ExecutionPolicy(precision=precision) if precision else ExecutionPolicy()
    if threads:
        ep.threads = threads
    return ep


def _tolerances(args: argparse.Namespace) -> tuple[float | None, float | None]:
    atol = args.atol if args.atol is not None else args.tolerance
    rtol = args.rtol if args.rtol is not None else args.tolerance
    if atol is None and rtol is None:
        return None, None
    return (atol or 0.0), (rtol or 0.0)


def _pair(text: str | None, what: str) -> list[str]:
    items = [t.strip() for t in (text or "").split(",") if t.strip()]
    if text is not None and len(items) != 2:
        raise SystemExit(f"error: --bisect compares two {what}, got {text!r}; pass two, comma-separated")
    return items


def _sides(args: argparse.Namespace) -> tuple[Any, Any]:
    from ..inference.bisect import Side
    from ..policies import KernelPolicy

    engines = [e.strip() for e in (args.engines or "native").split(",") if e.strip()]
    policies = _pair(args.policies, "policies")
    precisions = _pair(args.precisions, "precisions")
    varied = [
        n
        for n, v in (("--engines", engines), ("--policies", policies), ("--precisions", precisions))
        if len(v) == 2
    ]
    if len(varied) != 1 or len(engines) > 2:
        raise SystemExit(
            "error: --bisect compares two runs: give exactly one of --engines a,b, --policies p1,p2 or "
            f"--precisions a,b (got {', '.join(varied) or 'none'})"
        )

    def side(i: int) -> Side:
        spec = engines[min(i, len(engines) - 1)]
        name, _, dev = spec.partition("@")
        pol = policies[i] if policies else None
        kp = None if pol in (None, "default") else KernelPolicy.load(pol)
        prec = precisions[i] if precisions else args.precision
        label = spec if len(engines) == 2 else (pol if policies else prec or "fp32")
        return Side(str(label), name, dev or args.device, kp, _exec_policy(prec, args.threads))

    return side(0), side(1)


def run_bisect(args: argparse.Namespace) -> int:
    """``compare --bisect``: print the first diverging node; exit 1 when one diverged."""
    from ..engines.onnx_model import load_model, onnx_io
    from ..inference.bisect import bisect, format_result

    a, b = _sides(args)
    atol, rtol = _tolerances(args)
    proto = load_model(args.model).proto
    inputs = (
        dict(np.load(args.inputs))
        if args.inputs
        else make_inputs(onnx_io(proto)[0], _parse_dims(args.dim), args.seed, args.int_high)
    )
    res = bisect(
        args.model,
        a,
        b,
        inputs,
        atol=1e-4 if atol is None else atol,
        rtol=1e-3 if rtol is None else rtol,
        max_memory=args.max_memory,
    )
    print(format_result(res, a.label, b.label))
    if args.json:
        with open(args.json, "w") as f:
            doc = asdict(res)
            doc["decisions"] = {k: [d.to_dict() for d in v] for k, v in res.decisions.items()}
            json.dump(doc, f, indent=2)
    return 1 if res.node else 0


def run_from_args(args: argparse.Namespace) -> int:
    """Execute a parsed ``compare`` command; returns the exit code (1: an engine failed
    or, with a tolerance, an output differs beyond it; bisect: a node diverged)."""
    if args.bisect:
        return run_bisect(args)
    if args.policies or args.precisions:
        raise SystemExit("error: --policies and --precisions go with --bisect; for engines use --engines")
    exec_policy = _exec_policy(args.precision, args.threads)
    inputs = dict(np.load(args.inputs)) if args.inputs else None
    engines = [e.strip() for e in (args.engines or "native").split(",") if e.strip()]
    rows, _ = compare(
        args.model,
        engines,
        reference=args.reference,
        device=args.device,
        exec_policy=exec_policy,
        inputs=inputs,
        dims=_parse_dims(args.dim),
        seed=args.seed,
        int_high=args.int_high,
        warmup=args.warmup,
        iterations=args.iterations,
        atol=_tolerances(args)[0],
        rtol=_tolerances(args)[1],
    )
    reference = rows[0].engine
    print(format_table(rows, reference))
    atol, rtol = _tolerances(args)
    failed = [r for r in rows if r.status != "ok"]
    mismatched = []
    if atol is not None and rtol is not None:
        mismatched = [
            f"{r.engine} {k}: max_abs {d['max_abs']:.3e}"
            for r in rows
            if r.status == "ok"
            for k, d in r.diffs.items()
            if not d.get("within", True)
        ]
        if mismatched:
            print(f"outside atol={atol:g}, rtol={rtol:g}: " + "; ".join(mismatched), file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"reference": reference, "rows": [asdict(r) for r in rows]}, f, indent=2)
    if not rows or rows[0].status != "ok":
        return 1
    return 1 if mismatched or (atol is not None and failed) else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m xpuruntime.cli.compare MODEL --engines ...``"""
    parser = argparse.ArgumentParser(
        prog="xpuruntime compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    configure(parser)
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
