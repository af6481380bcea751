"""``xpuruntime bench``: latency and throughput as trtexec and onnxruntime_perf_test report them.

Phases, each timed: build (the session: engine choice, model load, plan compile where
the shapes are known), the first run (plans compiled for symbolic shapes, arenas,
caches), ``--warmup`` runs, then the measured runs: ``--iterations`` runs, or as many
as fit in ``--duration`` seconds (both given: whichever ends later). ``--profile
trace.json`` profiles a few more runs after the measurement (so the profiler's cost
is not in the figures) and writes their per-step ranges as a Chrome/Perfetto trace.
``--json`` writes every figure, the raw per-run samples and the full configuration.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .output import model_label, print_table, tty

PERCENTILES = (50, 90, 95, 99)
PROFILED_RUNS = 10


def statistics(samples_ms: np.ndarray) -> dict[str, float]:
    """min/max/mean/stddev/median and the percentiles of per-run latencies (ms)."""
    out = {
        "min_ms": float(samples_ms.min()),
        "max_ms": float(samples_ms.max()),
        "mean_ms": float(samples_ms.mean()),
        "stddev_ms": float(samples_ms.std(ddof=1)) if samples_ms.size > 1 else 0.0,
        "median_ms": float(np.median(samples_ms)),
    }
    for p in PERCENTILES:
        out[f"p{p}_ms"] = float(np.percentile(samples_ms, p))
    return out


def _measure(run: Any, iterations: int | None, duration: float | None) -> list[float]:
    """Per-run latencies (ms) until both the iteration count and the duration are reached."""
    times: list[float] = []
    t_end = time.perf_counter() + duration if duration else None
    target = iterations if iterations is not None else (0 if duration else 50)

    def done() -> bool:
        return len(times) >= max(target, 1) and (t_end is None or time.perf_counter() >= t_end)

    progress = None
    if tty():
        from rich.progress import Progress

        progress = Progress(transient=True)
        progress.start()
        task = progress.add_task("benchmarking", total=duration or target)
    t_start = time.perf_counter()
    last_note = t_start
    try:
        while not done():
            t0 = time.perf_counter()
            run()
            t1 = time.perf_counter()
            times.append((t1 - t0) * 1e3)
            if progress is not None:
                progress.update(task, completed=(t1 - t_start) if duration else len(times))
            elif t1 - last_note >= 1.0:
                print(f"  {len(times)} runs, {t1 - t_start:.1f} s", file=sys.stderr, flush=True)
                last_note = t1
    finally:
        if progress is not None:
            progress.stop()
    return times


def run_bench(args: argparse.Namespace, session_factory: Any, inputs_factory: Any) -> int:
    """Execute a parsed ``bench`` command; returns the exit status."""
    t0 = time.perf_counter()
    sess = session_factory(args)
    build_ms = (time.perf_counter() - t0) * 1e3
    feeds = inputs_factory(sess, args)
    t0 = time.perf_counter()
    sess.run(feeds)
    first_run_ms = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    for _ in range(args.warmup):
        sess.run(feeds)
    warmup_ms = (time.perf_counter() - t0) * 1e3

    t_measure = time.perf_counter()
    times = _measure(lambda: sess.run(feeds), args.iterations, args.duration)
    wall_s = time.perf_counter() - t_measure
    samples = np.asarray(times)
    batch = max((v.shape[0] for v in feeds.values() if getattr(v, "ndim", 0) > 0), default=1)
    stats = statistics(samples)
    result: dict[str, Any] = {
        "model": str(args.model),
        "engine": sess.engine,
        "device": sess.device,
        "batch": int(batch),
        "iterations": len(times),
        "wall_s": wall_s,
        "build_ms": build_ms,
        "first_run_ms": first_run_ms,
        "warmup_runs": args.warmup,
        "warmup_ms": warmup_ms,
        **stats,
        "runs_per_s": len(times) / wall_s if wall_s > 0 else 0.0,
        "throughput_per_s": float(1e3 * batch / samples.mean()),
    }
    print(f"model: {model_label(args.model)}  engine: {sess.engine}  device: {sess.device}  batch: {batch}")
    print(
        f"build {build_ms:.1f} ms, first run {first_run_ms:.2f} ms, {args.warmup} warm-up runs "
        f"{warmup_ms:.1f} ms, {len(times)} measured runs in {wall_s:.2f} s"
    )
    print_table(
        "latency",
        ["min ms", "mean ms", "stddev ms", *(f"p{p} ms" for p in PERCENTILES), "max ms", "items/s"],
        [
            [
                *(f"{stats[k]:.3f}" for k in ("min_ms", "mean_ms", "stddev_ms")),
                *(f"{stats[f'p{p}_ms']:.3f}" for p in PERCENTILES),
                f"{stats['max_ms']:.3f}",
                f"{result['throughput_per_s']:.1f}",
            ]
        ],
    )
    if args.profile:
        from ..runtime.profiler import profile

        with profile(args.profile) as prof:
            for _ in range(PROFILED_RUNS):
                sess.run(feeds)
        print(f"profile of {PROFILED_RUNS} more runs written to {args.profile} (chrome://tracing, Perfetto)")
        print(prof.summary())
        result["profile"] = str(args.profile)
    if args.json:
        result["samples_ms"] = times
        result["configuration"] = configuration(args, sess, feeds)
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


def configuration(args: argparse.Namespace, sess: Any, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    """Everything that went into the figures: flags, policies, inputs and the machine."""
    import xpuruntime

    config: dict[str, Any] = {k: v for k, v in vars(args).items() if k not in ("func",) and not callable(v)}
    from .args import resolve_policies

    for name, pol in zip(("kernel_policy", "exec_policy"), resolve_policies(args)):
        config[f"{name}_resolved"] = None if pol is None else json.loads(pol.to_json())
    config["inputs_resolved"] = {k: {"dtype": str(v.dtype), "shape": list(v.shape)} for k, v in feeds.items()}
    config["xpuruntime_version"] = xpuruntime.__version__
    config["python"] = platform.python_version()
    config["machine"] = platform.machine()
    config["processor"] = platform.processor()
    return config
