"""``xpuruntime compare MODEL --engines native,onnxruntime,openvino``.

Runs the same inputs through each engine (``name`` or ``name@device``, e.g.
``onnxruntime@cuda``) and prints, against a reference engine,
the output differences (max abs, max rel, cosine similarity) and each engine's
latency. An engine that cannot build or run gets a row with the reason instead of
stopping the comparison.

Inputs are random (float: standard normal; integers: uniform in [0, --int-high);
bool: random) with symbolic dimensions set by ``--dim name=value`` (default 1), or
read from an ``.npz`` file with ``--inputs``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


# ------------------------------------------------------------------- metrics
def diff_metrics(out: Any, ref: Any) -> dict[str, float]:
    """max_abs, max_rel and cosine of ``out`` against ``ref`` (computed in float64).

    max_rel is elementwise |out−ref| / max(|ref|, 1e-6·max|ref|), so elements where
    the reference is (near) zero do not turn the ratio into noise.
    """
    a = np.asarray(out, dtype=np.float64).ravel()
    b = np.asarray(ref, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: {np.shape(out)} vs reference {np.shape(ref)}")
    if a.size == 0:
        return {"max_abs": 0.0, "max_rel": 0.0, "cosine": 1.0}
    diff = np.abs(a - b)
    scale = np.abs(b).max()
    floor = max(1e-6 * scale, np.finfo(np.float64).tiny)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    cosine = float(a @ b / (na * nb)) if na > 0 and nb > 0 else (1.0 if na == nb else 0.0)
    return {
        "max_abs": float(diff.max()),
        "max_rel": float((diff / np.maximum(np.abs(b), floor)).max()),
        "cosine": cosine,
    }


# --------------------------------------------------------------------- inputs
def make_inputs(
    infos: Sequence[Any], dims: dict[str, int], seed: int, int_high: int
) -> dict[str, np.ndarray]:
    """Random inputs for TensorInfo-like specs; symbolic dims from ``dims`` (else 1)."""
    from ..engines.onnx_model import numpy_dtype

    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for info in infos:
        shape = tuple(d if isinstance(d, int) and d >= 0 else dims.get(str(d), 1) for d in info.shape)
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
) -> tuple[list[EngineResult], dict[str, np.ndarray]]:
    """Run ``inputs`` (or random ones) through every engine; compare with ``reference``.

    Returns the rows (reference first) and the inputs used.
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
                    "ok",
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
        "--engines", required=True, help="comma-separated engine names, e.g. native,onnxruntime,openvino"
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


def run_from_args(args: argparse.Namespace) -> int:
    """Execute a parsed ``compare`` command; returns the exit code."""
    exec_policy = None
    if args.precision:
        from ..policies import ExecutionPolicy

        exec_policy = ExecutionPolicy(precision=args.precision)
    inputs = dict(np.load(args.inputs)) if args.inputs else None
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
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
    )
    reference = rows[0].engine
    print(format_table(rows, reference))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"reference": reference, "rows": [asdict(r) for r in rows]}, f, indent=2)
    return 0 if rows and rows[0].status == "ok" else 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m xpuruntime.cli.compare MODEL --engines ...``"""
    parser = argparse.ArgumentParser(
        prog="xpuruntime compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    configure(parser)
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
