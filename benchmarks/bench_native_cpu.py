#!/usr/bin/env python3
"""The native engine against ONNX Runtime's and OpenVINO's CPU engines over public
architectures (see native_cpu_models.py: >= 20 torchvision and ``transformers`` models,
random weights, exported by ``torch.onnx.export`` inside the run), in one process, at the
same thread count, batch 1, fp32.

Per model: the outputs are checked first (native vs ONNX Runtime, max relative error
``max|ours - ort| / max|ort|``; OpenVINO's too); then p50/p90 latency of the three engines
in alternating blocks of runs (so machine load hits all alike; each block starts after a
pause and two warm runs, so no engine runs against another's still-spinning threads);
native/ORT and native/OpenVINO ratios; the native plan compile time (the C++ compiler,
from the plan's pass log) and session build time (front end included); the native
arena next to the sum of all intermediates; and peak activation memory of native and ORT,
each measured the same way in its own fresh child process (PEAK_METHOD below). The
dynamic-shape model runs at several shapes and is compared with the same model exported
at each fixed shape. A model that fails to export, build, run or match is reported with
its error and counts as a miss. The JSON's ``goals`` list has one entry per goal of
issue 18, then issue 36's idle goals, with the held-out half of the models (``unseen``
in native_cpu_models.py, ``half`` per row) against the tuned half.

    python benchmarks/bench_native_cpu.py --threads 2 --out benchmarks/results/native_cpu_zoo.json
    python benchmarks/bench_native_cpu.py --quick --models resnet18,swin_t
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from bench_session_overhead import cpu_name  # sibling scripts (their folder is on sys.path)
from native_cpu_models import MODELS, ModelSpec, export

TOLERANCE = 1e-4  # native vs ORT, max relative error
BLOCK_SECONDS = 0.5  # target wall time of one timed block of one engine


def _rss_kb() -> tuple[int, int]:
    rss = hwm = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm


# Peak activation memory, measured the same way for both engines: each engine in
# its own fresh child process, the resident-set high-water mark reset (clear_refs)
# after the session is built, so weights and everything session creation touched
# are excluded, then one run: VmHWM after it minus VmRSS before it. The children
# run with a fixed malloc mmap threshold (MALLOC_MMAP_THRESHOLD_=65536): every
# block of 64 KiB or more is its own mapping, returned to the system when freed.
# Without it, glibc keeps memory freed during session creation in its heap (ONNX
# Runtime frees ~90 MB of graph-optimization temporaries on ResNet-18) and the
# run reuses it without growing RSS, which made ORT's activations look like
# 0.5 MB. ORT is measured as configured for the timings (CPU memory arena on) and
# with the arena off (exact-size allocations: a lower bound on its activations).
PEAK_CHILD_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}
PEAK_METHOD = (
    "fresh child process per engine, MALLOC_MMAP_THRESHOLD_=65536; VmHWM reset after session "
    "creation (weights excluded; a dynamic-shape model's native plan compiled up front for the "
    "feeds' shapes), peak RSS growth over the first run"
)


def peak_memory_child(engine: str, path: str, feeds_path: str, threads: int) -> None:
    """Child process: build one engine, run once, print the peak RSS growth (bytes)."""
    with np.load(feeds_path) as z:
        feeds = {k: z[k] for k in z.files}
    if engine == "native":
        import xpuruntime as xrt

        sess = xrt.InferenceSession(
            path,
            device="cpu",
            engine="native",
            exec_policy=xrt.ExecutionPolicy(threads=threads),
            input_shapes={k: list(v.shape) for k, v in feeds.items()},
        )
        run = lambda: sess.run(feeds)
    else:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.enable_cpu_mem_arena = engine == "onnxruntime"  # "onnxruntime_noarena": off
        s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        run = lambda: s.run(None, feeds)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    before, _ = _rss_kb()
    run()
    _, hwm = _rss_kb()
    extra = {}
    if engine == "native":
        import xpuruntime as xrt

        extra["scratch_peak_bytes"] = int(xrt._core.graph.scratch_peak_bytes())
    print(json.dumps({"peak_rss_growth_bytes": (hwm - before) * 1024, **extra}))


def peak_memory(path: Path, feeds: dict[str, np.ndarray], threads: int) -> dict[str, Any]:
    feeds_path = path.with_name(path.stem + "_feeds.npz")
    np.savez(feeds_path, **feeds)
    peaks = {}
    for engine in ("native", "onnxruntime", "onnxruntime_noarena"):
        proc = subprocess.run(
            [sys.executable, __file__, "--peak-child", engine, str(path), str(feeds_path), str(threads)],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, **PEAK_CHILD_ENV},
        )
        if proc.returncode != 0:
            raise RuntimeError(f"peak-memory child ({engine}) failed: {proc.stderr.strip()[-800:]}")
        peaks[engine] = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "native_scratch_peak_bytes": peaks["native"]["scratch_peak_bytes"],
        "native_peak_activation_bytes": peaks["native"]["peak_rss_growth_bytes"],
        "ort_peak_activation_bytes": peaks["onnxruntime"]["peak_rss_growth_bytes"],
        "ort_noarena_peak_activation_bytes": peaks["onnxruntime_noarena"]["peak_rss_growth_bytes"],
        "peak_activation_native_le_ort": peaks["native"]["peak_rss_growth_bytes"]
        <= peaks["onnxruntime"]["peak_rss_growth_bytes"],
    }


class Engines:
    """The three engines on one ONNX file, at the same thread count."""

    def __init__(self, path: Path, threads: int) -> None:
        import onnxruntime as ort
        import openvino as ov
        import xpuruntime as xrt

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        self.ort = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        core = ov.Core()
        # fp32 inference (OpenVINO would run bf16 where the CPU has it), one stream, latency mode.
        self.ov = core.compile_model(
            str(path),
            "CPU",
            {
                "INFERENCE_NUM_THREADS": threads,
                "NUM_STREAMS": 1,
                "PERFORMANCE_HINT": "LATENCY",
                "INFERENCE_PRECISION_HINT": "f32",
            },
        )
        self.ov_request = self.ov.create_infer_request()
        t0 = time.perf_counter()
        self.native = xrt.InferenceSession(
            str(path), device="cpu", engine="native", exec_policy=xrt.ExecutionPolicy(threads=threads)
        )
        self.native_build_s = time.perf_counter() - t0

    def runners(self, feeds: dict[str, np.ndarray]) -> dict[str, Callable[[], Any]]:
        return {
            "native": lambda: self.native.run(feeds)["output"],
            "ort": lambda: self.ort.run(None, feeds)[0],
            "openvino": lambda: self.ov_request.infer(feeds)[0],
        }


def rel_error(ours: np.ndarray, ref: np.ndarray) -> float:
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    if ours.shape != ref.shape:
        return float("inf")
    return float(np.abs(ours - ref).max() / max(np.abs(ref).max(), 1e-30))


def time_interleaved(fns: dict[str, Callable[[], Any]], rounds: int, quick: bool) -> dict[str, list[float]]:
    """Alternating blocks of runs per engine; returns each engine's latencies (ms)."""
    est = {}
    for key, fn in fns.items():  # warm + estimate, sizing the blocks to ~BLOCK_SECONDS
        fn()
        a = time.perf_counter()
        fn()
        est[key] = time.perf_counter() - a
    per_block = 2 if quick else int(np.clip(BLOCK_SECONDS / max(min(est.values()), 1e-4), 3, 40))
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for key, fn in fns.items():
            # The engine that ran before may still hold the cores (ORT's and OpenVINO's
            # workers spin after a run, ours briefly): let its threads go to sleep,
            # then re-warm, so no block starts against the previous one's spinning.
            time.sleep(0.05)
            fn()
            fn()
            for _ in range(per_block):
                a = time.perf_counter()
                fn()
                times[key].append((time.perf_counter() - a) * 1e3)
    return times


def _latency(times: dict[str, list[float]]) -> dict[str, Any]:
    p50 = {k: float(np.percentile(v, 50)) for k, v in times.items()}
    out: dict[str, Any] = {f"{k}_p50_ms": p50[k] for k in times}
    out.update({f"{k}_p90_ms": float(np.percentile(v, 90)) for k, v in times.items()})
    out["ratio_native_over_ort"] = p50["native"] / p50["ort"]
    out["ratio_native_over_openvino"] = p50["native"] / p50["openvino"]
    out["runs_per_engine"] = len(times["native"])
    return out


def _compile_ms(sess: Any) -> float:
    line = next(line for line in sess.plan.pass_log if line.startswith("compile time"))
    return float(line.split(":")[1].strip().split()[0])


def _check(eng: Engines, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    fns = eng.runners(feeds)
    theirs = fns["ort"]()
    ours = fns["native"]()
    res = {
        "output_shape": list(np.shape(theirs)),
        "ort_output_max_abs": float(np.abs(theirs).max()),
        "ort_output_std": float(np.std(theirs)),
        "max_rel_error_vs_ort": rel_error(ours, theirs),
        "openvino_rel_error_vs_ort": rel_error(fns["openvino"](), theirs),
    }
    # A constant reference output (weights initialized to zero) would make the check vacuous.
    res["matches_ort"] = res["max_rel_error_vs_ort"] <= TOLERANCE and res["ort_output_std"] > 0
    return res


def measure(spec: ModelSpec, args: argparse.Namespace, stage: list[str]) -> dict[str, Any]:
    """Measure one model; ``stage`` names the step running (for the error report)."""
    cache, threads, rounds = Path(args.cache), args.threads, args.rounds
    stage[0] = "export"
    t0 = time.perf_counter()
    path, feeds = export(spec, cache, args.exporter)
    export_s = time.perf_counter() - t0
    stage[0] = "build"
    eng = Engines(path, threads)
    row: dict[str, Any] = {
        "model": spec.name,
        "family": spec.family,
        "config": spec.config,
        "export_s": export_s,
    }
    row["session_build_s"] = eng.native_build_s
    if spec.shapes:
        return measure_dynamic(spec, args, path, eng, row, stage)
    stage[0] = "check"
    row.update(_check(eng, feeds))
    stage[0] = "time"
    row.update(_latency(time_interleaved(eng.runners(feeds), rounds, args.quick)))
    sess = eng.native
    row["plan_compile_ms"] = _compile_ms(sess)
    mem = sess.memory()
    row["arena_bytes"] = mem["arena_bytes"]
    row["sum_intermediate_bytes"] = mem["intermediate_bytes"]
    row["steps"] = len(sess.plan.steps)
    if not args.quick:
        stage[0] = "peak memory"
        row.update(peak_memory(path, feeds, threads))
    return row


def measure_dynamic(
    spec: ModelSpec, args: argparse.Namespace, path: Path, eng: Engines, row: dict[str, Any], stage: list[str]
) -> dict[str, Any]:
    """The dynamic-axes model at each shape: native (dynamic export) vs ORT and OpenVINO on
    the same file, and vs native on the model exported at that fixed shape, interleaved."""
    import xpuruntime as xrt

    shapes = []
    for shape in spec.shapes:
        stage[0] = f"fixed export {shape}"
        fixed_path, feeds = export(spec, Path(args.cache), args.exporter, fixed_shape=shape)
        stage[0] = f"fixed build {shape}"
        fixed = xrt.InferenceSession(
            str(fixed_path),
            device="cpu",
            engine="native",
            exec_policy=xrt.ExecutionPolicy(threads=args.threads),
        )
        stage[0] = f"check {shape}"
        res: dict[str, Any] = {"shape": list(shape), **_check(eng, feeds)}
        fixed_out = fixed.run(feeds)["output"]
        res["fixed_rel_error_vs_ort"] = rel_error(fixed_out, eng.runners(feeds)["ort"]())
        res["matches_ort"] = res["matches_ort"] and res["fixed_rel_error_vs_ort"] <= TOLERANCE
        stage[0] = f"time {shape}"
        fns = eng.runners(feeds)
        fns["native_fixed"] = lambda s=fixed, f=feeds: s.run(f)["output"]
        times = time_interleaved(fns, args.rounds, args.quick)
        res.update(_latency(times))
        res["ratio_dynamic_over_fixed"] = res["native_p50_ms"] / res["native_fixed_p50_ms"]
        res["plan_compile_ms"] = _compile_ms(eng.native)  # this shape's specialization
        res["fixed_plan_compile_ms"] = _compile_ms(fixed)
        res["arena_bytes"] = eng.native.memory()["arena_bytes"]
        if not args.quick:
            stage[0] = f"peak memory {shape}"
            res.update(peak_memory(path, feeds, args.threads))
        shapes.append(res)
    row["shapes"] = shapes
    # The model's figures: the median over its shapes (the worst shape is in "shapes").
    for key in ("ratio_native_over_ort", "ratio_native_over_openvino", "ratio_dynamic_over_fixed"):
        row[key] = float(np.median([s[key] for s in shapes]))
    row["max_rel_error_vs_ort"] = max(s["max_rel_error_vs_ort"] for s in shapes)
    row["matches_ort"] = all(s["matches_ort"] for s in shapes)
    row["plan_compile_ms"] = max(max(s["plan_compile_ms"], s["fixed_plan_compile_ms"]) for s in shapes)
    if not args.quick:
        row["peak_activation_native_le_ort"] = all(s["peak_activation_native_le_ort"] for s in shapes)
    return row


def _summary(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"{row['model']}: FAILED at {row['error']['stage']}: {row['error']['message'][:400]}"
    return (
        f"{row['model']}: native/ORT {row['ratio_native_over_ort']:.2f}, native/OpenVINO "
        f"{row['ratio_native_over_openvino']:.2f}, rel err {row['max_rel_error_vs_ort']:.1e}, "
        f"compile {row['plan_compile_ms']:.0f} ms"
        + (f", dynamic/fixed {row['ratio_dynamic_over_fixed']:.2f}" if "shapes" in row else "")
    )


def goals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per goal of issue 18. A model that failed counts as a miss of every goal
    (its figures are unknown), and the figures say over how many models they were taken."""
    ok = [r for r in rows if "error" not in r]
    n, failed = len(rows), [r["model"] for r in rows if "error" in r]
    all_ran = not failed
    over = f"over {len(ok)} of {n} models" + (f" (failed: {', '.join(failed)})" if failed else "")

    def stat(key: str, fn: Callable[[Any], Any]) -> float | None:
        vals = [r[key] for r in ok if key in r]
        return float(fn(vals)) if vals else None

    med_ort, worst_ort = stat("ratio_native_over_ort", np.median), stat("ratio_native_over_ort", np.max)
    med_ov = stat("ratio_native_over_openvino", np.median)
    dyn = [s["ratio_dynamic_over_fixed"] for r in ok for s in r.get("shapes", [])]
    matched = [r["model"] for r in ok if r.get("matches_ort")]
    worst_compile = stat("plan_compile_ms", np.max)
    mem = [r for r in ok if "peak_activation_native_le_ort" in r]
    mem_ok = [r["model"] for r in mem if r["peak_activation_native_le_ort"]]

    def le(x: float | None, limit: float) -> bool:
        return all_ran and x is not None and x <= limit

    return [
        {
            "name": f"median native/ORT p50 latency ratio {over}",
            "figure": med_ort,
            "target": "<= 1.0",
            "met": le(med_ort, 1.0),
        },
        {
            "name": f"worst native/ORT p50 latency ratio {over}",
            "figure": worst_ort,
            "target": "<= 1.5",
            "met": le(worst_ort, 1.5),
        },
        {
            "name": f"moonshot: median native/OpenVINO p50 latency ratio {over}",
            "figure": med_ov,
            "target": "<= 1.0",
            "met": le(med_ov, 1.0),
        },
        {
            "name": "dynamic-shape model within 10% of the same model at fixed shapes (worst shape, "
            "native dynamic p50 / native fixed p50)",
            "figure": max(dyn) if dyn else None,
            "target": "<= 1.10",
            "met": bool(dyn) and max(dyn) <= 1.10,
        },
        {
            "name": f"every model builds and matches ORT within {TOLERANCE:g} relative",
            "figure": f"{len(matched)} of {n} (misses: {', '.join(sorted({r['model'] for r in rows} - set(matched))) or 'none'})",
            "target": f"{n} of {n}",
            "met": len(matched) == n,
        },
        {
            "name": f"plan compile time per model, worst {over} (ms)",
            "figure": worst_compile,
            "target": "<= 2000",
            "met": le(worst_compile, 2000.0),
        },
        {
            "name": "peak activation memory native <= ORT's (arena on), per model",
            "figure": f"{len(mem_ok)} of {len(mem)} measured" if mem else "not measured (--quick)",
            "target": f"{n} of {n}",
            "met": bool(mem) and len(mem_ok) == n,
        },
    ]


def goals_issue36(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 36's idle goals, over the models of this run, and the held-out half
    (``ModelSpec.unseen``: no kernel priority was chosen on it) against the tuned half.
    The under-load goal is bench_native_cpu_load.py's."""
    ok = [r for r in rows if "error" not in r and "ratio_native_over_ort" in r]
    failed = [r["model"] for r in rows if "error" in r]

    def med(key: str, half: str | None = None) -> float | None:
        vals = [r[key] for r in ok if key in r and (half is None or r.get("half") == half)]
        return float(np.median(vals)) if vals else None

    def count(half: str) -> int:
        return sum(1 for r in ok if r.get("half") == half)

    med_ort, med_ov = med("ratio_native_over_ort"), med("ratio_native_over_openvino")
    worst = max((r["ratio_native_over_ort"] for r in ok), default=None)
    tuned, unseen = med("ratio_native_over_ort", "tuned"), med("ratio_native_over_ort", "unseen")
    gap = unseen / tuned if tuned and unseen else None
    over = f"over {len(ok)} of {len(rows)} models" + (f" (failed: {', '.join(failed)})" if failed else "")

    def g(name: str, figure: Any, target: str, met: bool) -> dict[str, Any]:
        return {
            "issue": 36,
            "name": name,
            "figure": figure,
            "target": target,
            "met": bool(met and not failed),
        }

    return [
        g(
            f"issue 36: median native/ORT p50 {over}",
            med_ort,
            "<= 0.8",
            med_ort is not None and med_ort <= 0.8,
        ),
        g(f"issue 36: worst native/ORT p50 {over}", worst, "<= 1.2", worst is not None and worst <= 1.2),
        g(
            f"issue 36: median native/OpenVINO p50 {over}",
            med_ov,
            "<= 1.0",
            med_ov is not None and med_ov <= 1.0,
        ),
        g(
            f"issue 36: the held-out half's median native/ORT ({count('unseen')} models: {unseen}) within 10% "
            f"of the tuned half's ({count('tuned')} models: {tuned}); unseen/tuned",
            gap,
            "<= 1.10",
            gap is not None and gap <= 1.10,
        ),
    ]


def print_table(rows: list[dict[str, Any]], goal_list: list[dict[str, Any]]) -> None:
    header = [
        "model",
        "native ms",
        "ORT ms",
        "OV ms",
        "nat/ORT",
        "nat/OV",
        "rel err",
        "compile ms",
        "mem<=ORT",
    ]
    lines = []
    for r in rows:
        if "error" in r:
            lines.append([r["model"], f"FAILED at {r['error']['stage']}: {r['error']['message'][:70]}"])
            continue
        src = r if "native_p50_ms" in r else r["shapes"][-1]
        lines.append(
            [
                r["model"]
                + (
                    f" @{'x'.join(map(str, src['shape']))}; ratios: median of shapes" if "shapes" in r else ""
                ),
                f"{src['native_p50_ms']:.2f}",
                f"{src['ort_p50_ms']:.2f}",
                f"{src['openvino_p50_ms']:.2f}",
                f"{r['ratio_native_over_ort']:.2f}",
                f"{r['ratio_native_over_openvino']:.2f}",
                f"{r['max_rel_error_vs_ort']:.1e}",
                f"{r['plan_compile_ms']:.0f}",
                str(r.get("peak_activation_native_le_ort", "-")),
            ]
        )
    try:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="native vs ONNX Runtime vs OpenVINO (CPU, p50)")
        for h in header:
            table.add_column(h)
        for line in lines:
            table.add_row(*line)
        Console(width=max(Console().width, 140)).print(table)
    except ImportError:
        print(" | ".join(header))
        for line in lines:
            print(" | ".join(line))
    for g in goal_list:
        print(f"[{'met' if g['met'] else 'MISSED'}] {g['name']}: {g['figure']} (target {g['target']})")


def versions() -> dict[str, Any]:
    import onnx
    import onnxruntime as ort
    import openvino as ov
    import torch
    import torchvision
    import transformers
    import xpuruntime as xrt

    return {
        "xpuruntime": xrt.__version__,
        "onnxruntime": ort.__version__,
        "openvino": ov.get_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "transformers": transformers.__version__,
        "onnx": onnx.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cpu_gemm": xrt.ops.cpu_gemm_info(),
    }


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--peak-child":
        _, _, engine, path, feeds, threads = sys.argv
        peak_memory_child(engine, path, feeds, int(threads))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5, help="alternating timed blocks per engine")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="2 rounds of 2 runs per engine, no peak-memory children: finds models that fail",
    )
    ap.add_argument(
        "--models", default=",".join(MODELS), help=f"comma-separated subset of: {', '.join(MODELS)}"
    )
    ap.add_argument(
        "--exporter",
        choices=("torchscript", "dynamo"),
        default="torchscript",
        help="torch.onnx.export path: TorchScript at opset 17 (default) or dynamo at opset 18",
    )
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "xpuruntime" / "bench_models"))
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "native_cpu_zoo.json"))
    args = ap.parse_args()
    if args.quick:
        args.rounds = 2
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        ap.error(f"unknown models {unknown}; choose from {', '.join(MODELS)}")
    # Same thread count for every engine: our op pool (also set by ExecutionPolicy.threads),
    # OpenBLAS (cpu_blas) and OpenMP. Must be set before xpuruntime/onnxruntime load.
    for var in ("XRT_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    Path(args.cache).mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    start = time.perf_counter()
    rows = []
    for name in names:
        stage = ["start"]
        try:
            row = measure(MODELS[name], args, stage)
        except Exception as e:  # noqa: BLE001 - reported, never dropped: the model counts as a miss
            msg = f"{type(e).__name__}: {e}".strip()
            row = {
                "model": name,
                "family": MODELS[name].family,
                "config": MODELS[name].config,
                "error": {"stage": stage[0], "message": msg, "traceback": traceback.format_exc()[-2000:]},
            }
        row["half"] = "unseen" if MODELS[name].unseen else "tuned"
        print(_summary(row), flush=True)
        rows.append(row)
    goal_list = goals(rows) + goals_issue36(rows)
    out = {
        "benchmark": "native engine vs ONNX Runtime CPU EP vs OpenVINO CPU, one process, same thread count, "
        "batch 1 (dynamic model: several shapes), fp32, interleaved blocks",
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "threads": args.threads,
        "rounds": args.rounds,
        "quick": args.quick,
        "exporter": args.exporter,
        "tolerance_rel_vs_ort": TOLERANCE,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "wall_s": time.perf_counter() - start,
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cpu_model": cpu_name(),
            "cores": os.cpu_count(),
            "load_average_at_start": load_start,
            "load_average_at_end": os.getloadavg(),
        },
        "versions": versions(),
        "openvino_config": "INFERENCE_NUM_THREADS=threads, NUM_STREAMS=1, PERFORMANCE_HINT=LATENCY, "
        "INFERENCE_PRECISION_HINT=f32",
        "peak_activation_method": PEAK_METHOD,
        "goals": goal_list,
        "results": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2, default=str) + "\n")
    print_table(rows, goal_list)
    print(f"wrote {args.out} ({out['wall_s']:.0f} s; load average {load_start} -> {os.getloadavg()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
