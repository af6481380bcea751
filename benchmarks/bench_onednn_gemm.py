"""GEMM kernel ``onednn`` against ``cpu_blas`` in the native engine, and ONNX Runtime:
models of ``native_cpu_models.py`` (exported once into the cache, like
``bench_native_cpu.py``) at the same thread count, interleaved (each round runs every
variant once, in rotating order), plus single GEMMs of transformer and conv shapes.

    PYTHONPATH=python XRT_BUILD_DIR=build/<dir> python3 benchmarks/bench_onednn_gemm.py \
        [--threads 2] [--rounds 10] [--models bert_base,gpt2_small,...] [--out results/onednn_gemm.json]

Prints median and minimum ms per variant and writes JSON with the load average before
and after (oneDNN splits each GEMM statically over its OpenMP threads, so a core taken
by another process stalls the whole GEMM: numbers from a busy machine say little).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from native_cpu_models import MODELS, export

DEFAULT_MODELS = ["bert_base", "gpt2_small", "distilbert", "vit_b_16", "convnext_tiny", "resnet50"]
# (M, K, N): bert/gpt2 projections and FFN at 128 tokens, a 1x1 conv at 56², a 3x3 conv.
GEMMS = [(128, 768, 768), (128, 768, 3072), (128, 3072, 768), (3136, 64, 64), (196, 1152, 128), (1, 768, 768)]
KERNELS = ["onednn", "cpu_blas"]


def make_runners(path: Path, feeds: dict[str, np.ndarray], threads: int) -> dict[str, Any]:
    """One callable per variant: the native engine with matmul pinned to each kernel, ORT."""
    import onnxruntime as ort
    import xpuruntime as xrt

    ep = xrt.ExecutionPolicy(threads=threads)
    runners: dict[str, Any] = {}
    for k in KERNELS:
        s = xrt.InferenceSession(
            str(path),
            device="cpu",
            engine="native",
            exec_policy=ep,
            kernel_policy=xrt.KernelPolicy(matmul=k, mode="require"),
        )
        runners[f"native_{k}"] = lambda s=s: s.run(feeds)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    o = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    runners["ort"] = lambda: o.run(None, feeds)
    return runners


def interleave(runners: dict[str, Any], rounds: int, warmup: int = 2) -> dict[str, list[float]]:
    """ms per run of every variant, one run each per round, rotating the order."""
    for fn in runners.values():
        for _ in range(warmup):
            fn()
    names = list(runners)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            t = time.perf_counter()
            runners[n]()
            times[n].append((time.perf_counter() - t) * 1e3)
    return times


def gemm_times(threads: int, rounds: int) -> dict[str, dict[str, float]]:
    """Median µs of one GEMM per kernel (xpuruntime.ops, plain row-major operands)."""
    import xpuruntime as xrt
    from xpuruntime import ops

    rng = np.random.default_rng(0)
    ep = xrt.ExecutionPolicy(threads=threads)
    out: dict[str, dict[str, float]] = {}
    for m, k, n in GEMMS:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        c = np.empty((m, n), np.float32)
        runners = {
            kern: (
                lambda kern=kern, a=a, b=b, c=c: ops.matmul_with_kernel(
                    kern, a, b, out=c, execution_policy=ep
                )
            )
            for kern in KERNELS
        }
        times = interleave(runners, rounds * 10, warmup=5)
        out[f"{m}x{k}x{n}"] = {kern: statistics.median(v) * 1e3 for kern, v in times.items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "xpuruntime" / "bench_models"))
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    os.environ.setdefault("XRT_NUM_THREADS", str(args.threads))
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"threads": args.threads, "rounds": args.rounds, "load_before": os.getloadavg()}
    result["gemm_us"] = gemm_times(args.threads, args.rounds)
    print(f"{'GEMM MxKxN':>16} " + " ".join(f"{k:>10}" for k in KERNELS) + "   (median us)")
    for shape, t in result["gemm_us"].items():
        print(f"{shape:>16} " + " ".join(f"{t[k]:>10.1f}" for k in KERNELS))
    result["models"] = {}
    print(f"{'model':>16} {'native_onednn':>14} {'native_cpu_blas':>16} {'ort':>8}   (median / min ms)")
    for name in filter(None, args.models.split(",")):
        path, feeds = export(MODELS[name], cache, "torchscript")
        times = interleave(make_runners(path, feeds, args.threads), args.rounds)
        med = {k: statistics.median(v) for k, v in times.items()}
        low = {k: min(v) for k, v in times.items()}
        result["models"][name] = {"median_ms": med, "min_ms": low}
        print(f"{name:>16} " + " ".join(f"{med[k]:>7.1f}/{low[k]:<7.1f}" for k in times))
    result["load_after"] = os.getloadavg()
    print(f"load average before {result['load_before']}, after {result['load_after']}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
