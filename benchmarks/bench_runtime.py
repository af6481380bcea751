"""Runtime foundation benchmark (issue 2), run on a GPU machine.

1. Allocator: the same sequence of 10^5 alloc/free pairs of mixed sizes (log-uniform
   512 B .. 64 MiB, fixed seed, a live working set of 64 slots: step i frees slot
   s_i if live, then allocates size_i into it) through
     - our CachingAllocator and raw cudaMalloc/cudaFree, each in a C++ loop
       (_core.memory._bench_alloc_sequence);
     - torch's CUDA caching allocator in a C++ loop (benchmarks/torch_alloc_loop.cpp,
       compiled here against the installed torch);
     - the same three from Python loops (ours: _core.memory.raw_alloc/raw_free;
       torch: torch.cuda.caching_allocator_alloc/delete and the raw torch._C calls;
       cudaMalloc: cupy.cuda.runtime.malloc/free), plus an empty loop as baseline.
   Caching allocators run two passes: 'cold' (the pool is empty, so it includes the
   cudaMallocs that fill it) and 'warm' (the steady state that matters).
2. DLPack: a CUDA torch tensor -> xpuruntime.from_dlpack -> torch.from_dlpack round
   trip, against torch's own round trips (torch.utils.dlpack to/from and
   torch.from_dlpack of a torch tensor); median per call over many calls, with the
   DLPack paths our side took per call (C exchange API or Python protocol).
   `--dlpack-cpu` runs only this section with CPU tensors (no GPU needed).

Writes benchmarks/results/runtime_<device>.json and prints a table.
Usage: python benchmarks/bench_runtime.py [--pairs 100000] [--out PATH]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import platform
import re
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
GOAL_ALLOC_RATIO = 1.2  # ours / torch, warm C++ loops
GOAL_DLPACK_US = 5.0  # our import + export round trip


def make_sequence(pairs: int, seed: int, slots: int, lo: int, hi: int) -> tuple[list[int], list[int]]:
    """Sizes log-uniform in [lo, hi] bytes and the slot each step reuses."""
    rng = np.random.default_rng(seed)
    sizes = np.exp(rng.uniform(np.log(lo), np.log(hi), pairs)).astype(np.int64)
    slot_ids = rng.integers(0, slots, pairs, dtype=np.int32)
    return sizes.tolist(), slot_ids.tolist()


def peak_live_bytes(sizes: list[int], slots: list[int], num_slots: int) -> int:
    """The most bytes the sequence holds live at once (what any allocator must hold)."""
    live = [0] * num_slots
    total = peak = 0
    for size, slot in zip(sizes, slots):
        total += size - live[slot]
        live[slot] = size
        peak = max(peak, total)
    return peak


def python_loop(
    sizes: list[int],
    slots: list[int],
    num_slots: int,
    alloc: Callable[[int], int],
    free: Callable[[int], Any],
) -> float:
    """Seconds for one pass of the sequence driven from Python."""
    live = [0] * num_slots
    t0 = time.perf_counter()
    for size, slot in zip(sizes, slots):
        ptr = live[slot]
        if ptr:
            free(ptr)
        live[slot] = alloc(size)
    for ptr in live:
        if ptr:
            free(ptr)
    return time.perf_counter() - t0


def ns_per_pair(seconds: float, pairs: int) -> float:
    return seconds / pairs * 1e9


def load_torch_loop(torch: Any) -> tuple[Any, str]:
    """Compiles benchmarks/torch_alloc_loop.cpp against this torch; (module, error)."""
    try:
        from torch.utils.cpp_extension import load

        build = Path(os.environ.get("XRT_BENCH_BUILD", "/tmp/xrt_torch_alloc_loop"))
        build.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        mod = load(
            name="xrt_torch_alloc_loop",
            sources=[str(HERE / "torch_alloc_loop.cpp")],
            extra_cflags=["-O2"],
            with_cuda=True,
            build_directory=str(build),
            verbose=False,
        )
        print(f"  compiled torch_alloc_loop in {time.perf_counter() - t0:.1f} s", flush=True)
        return mod, ""
    except (ImportError, OSError, RuntimeError) as e:  # the JSON says why it is missing
        return None, f"{type(e).__name__}: {e}"


def bench_allocators(args: argparse.Namespace, core: Any, torch: Any, cupy: Any) -> dict[str, Any]:
    dev = "cuda:0"
    sizes, slots = make_sequence(args.pairs, args.seed, args.slots, args.min_bytes, args.max_bytes)
    n = len(sizes)
    out: dict[str, Any] = {
        "sequence": {
            "pairs": n,
            "seed": args.seed,
            "live_slots": args.slots,
            "min_bytes": args.min_bytes,
            "max_bytes": args.max_bytes,
            "distribution": "log-uniform sizes, uniform slot choice",
            "mean_bytes": float(np.mean(sizes)),
            "peak_live_bytes": peak_live_bytes(sizes, slots, args.slots),
        },
        "results": {},
    }
    res = out["results"]

    def record(key: str, seconds: list[float], measures: str, **extra: Any) -> None:
        res[key] = {
            "pass_seconds": seconds,
            "ns_per_pair": [ns_per_pair(s, n) for s in seconds],
            "measures": measures,
            **extra,
        }
        print(
            f"  {key:<28} " + "  ".join(f"{ns_per_pair(s, n):10.1f}" for s in seconds) + " ns/pair",
            flush=True,
        )

    # --- C++ loops --------------------------------------------------------------------
    r = core.memory._bench_alloc_sequence(sizes, slots, args.slots, "caching", dev, 2)
    record(
        "cpp.xpuruntime_caching",
        r["pass_seconds"],
        "C++ loop over a fresh xpuruntime CachingAllocator (pass 0 cold, pass 1 warm)",
        stats={k: v for k, v in r.items() if k not in ("pass_seconds", "pairs_per_pass")},
    )
    raw_sizes, raw_slots = sizes[: args.raw_pairs], slots[: args.raw_pairs]
    r = core.memory._bench_alloc_sequence(raw_sizes, raw_slots, args.slots, "raw", dev, 1)
    res["cpp.cudaMalloc"] = {
        "pass_seconds": r["pass_seconds"],
        "ns_per_pair": [ns_per_pair(s, len(raw_sizes)) for s in r["pass_seconds"]],
        "pairs": len(raw_sizes),
        "measures": "C++ loop of cudaMalloc/cudaFree through the CUDA backend's raw_alloc/raw_free "
        f"(first {len(raw_sizes)} pairs of the sequence)",
    }
    print(
        f"  {'cpp.cudaMalloc':<28} {res['cpp.cudaMalloc']['ns_per_pair'][0]:10.1f} ns/pair "
        f"({len(raw_sizes)} pairs)",
        flush=True,
    )

    torch.cuda.empty_cache()
    loop, err = load_torch_loop(torch)
    if loop is not None:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        record(
            "cpp.torch_caching",
            loop.bench(sizes, slots, args.slots, 2),
            "C++ loop of c10::cuda::CUDACachingAllocator::raw_alloc/raw_delete "
            "(pass 0 cold after empty_cache, pass 1 warm)",
            stats={"peak_reserved_bytes": torch.cuda.max_memory_reserved()},
        )
        torch.cuda.empty_cache()
    else:
        res["cpp.torch_caching"] = {"error": err}
        print(f"  cpp.torch_caching unavailable: {err}", flush=True)

    # --- Python loops ---------------------------------------------------------------------
    record(
        "py.empty_loop_baseline",
        [python_loop(sizes, slots, args.slots, lambda s: s + 1, lambda p: None)],
        "the Python loop with trivial lambdas: interpreter overhead included in every py.* row",
    )
    raw_alloc, raw_free = core.memory.raw_alloc, core.memory.raw_free
    core.memory.empty_cache(dev)
    record(
        "py.xpuruntime_caching",
        [
            python_loop(sizes, slots, args.slots, lambda s: raw_alloc(s, dev), lambda p: raw_free(p, dev))
            for _ in range(2)
        ],
        "Python loop of _core.memory.raw_alloc(n, 'cuda:0')/raw_free (pass 0 cold, 1 warm)",
    )
    core.memory.empty_cache(dev)
    torch.cuda.empty_cache()
    record(
        "py.torch_caching_api",
        [
            python_loop(
                sizes,
                slots,
                args.slots,
                torch.cuda.caching_allocator_alloc,
                torch.cuda.caching_allocator_delete,
            )
            for _ in range(2)
        ],
        "Python loop of torch.cuda.caching_allocator_alloc/delete (pass 0 cold, 1 warm)",
    )
    torch.cuda.empty_cache()
    t_alloc = torch._C._cuda_cudaCachingAllocator_raw_alloc
    t_free = torch._C._cuda_cudaCachingAllocator_raw_delete
    stream = torch.cuda.current_stream().cuda_stream
    record(
        "py.torch_caching_raw_C",
        [python_loop(sizes, slots, args.slots, lambda s: t_alloc(s, stream), t_free) for _ in range(2)],
        "Python loop of torch._C._cuda_cudaCachingAllocator_raw_alloc/raw_delete, the thinnest "
        "Python path into torch's allocator (pass 0 cold, 1 warm)",
    )
    torch.cuda.empty_cache()
    if cupy is not None:
        record(
            "py.cudaMalloc_cupy",
            [python_loop(raw_sizes, raw_slots, args.slots, cupy.cuda.runtime.malloc, cupy.cuda.runtime.free)],
            f"Python loop of cupy.cuda.runtime.malloc/free = cudaMalloc/cudaFree "
            f"(first {len(raw_sizes)} pairs)",
        )
        res["py.cudaMalloc_cupy"]["ns_per_pair"] = [
            ns_per_pair(s, len(raw_sizes)) for s in res["py.cudaMalloc_cupy"]["pass_seconds"]
        ]

    # --- ratios ----------------------------------------------------------------------------
    def warm(key: str) -> float | None:
        v = res.get(key, {}).get("ns_per_pair")
        return v[-1] if v else None

    ratios: dict[str, Any] = {}
    ours_cpp, torch_cpp = warm("cpp.xpuruntime_caching"), warm("cpp.torch_caching")
    if ours_cpp and torch_cpp:
        ratios["cpp_warm_ours_over_torch"] = ours_cpp / torch_cpp
        ratios["goal_met"] = ours_cpp / torch_cpp <= GOAL_ALLOC_RATIO
    ours_py, torch_py = warm("py.xpuruntime_caching"), warm("py.torch_caching_raw_C")
    if ours_py and torch_py:
        ratios["py_warm_ours_over_torch_raw_C"] = ours_py / torch_py
    if warm("py.torch_caching_api") and ours_py:
        ratios["py_warm_ours_over_torch_api"] = ours_py / warm("py.torch_caching_api")
    if ours_cpp and warm("cpp.cudaMalloc"):
        ratios["cpp_cudaMalloc_over_ours_warm"] = warm("cpp.cudaMalloc") / ours_cpp
    ratios["goal"] = f"ours <= {GOAL_ALLOC_RATIO}x torch's caching allocator (warm C++ loops)"
    out["ratios"] = ratios
    return out


def bench_dlpack(args: argparse.Namespace, xrt: Any, torch: Any, device: str = "cuda") -> dict[str, Any]:
    """Median us per call of the DLPack round trip and its halves, against torch's own.

    The goal row is our public round trip, ``xpuruntime.from_dlpack(t).to_torch()``:
    the import takes torch's DLManagedTensorVersioned through torch's DLPack C
    exchange API and ``to_torch`` hands ours back through the same API. The
    protocol path ``torch.from_dlpack(ours)`` is measured next to it: its cost is
    mostly torch's own Python (``torch.from_dlpack`` on a torch tensor is slower
    still), which no producer can remove. Each row also records the DLPack paths our side took per call
    (``_core._dlpack_stats``), so the JSON shows whether the C exchange API was used.
    """
    core = xrt._core
    t = torch.randn(1024, device=device)
    ptr = t.data_ptr()
    rt = torch.from_dlpack(xrt.from_dlpack(t))
    assert rt.data_ptr() == ptr, "round trip copied the data"
    assert xrt.from_dlpack(t).to_torch().data_ptr() == ptr, "to_torch copied the data"
    ours_tensor = xrt.from_dlpack(t)
    cases: dict[str, tuple[Callable[[], Any], str]] = {
        "xpuruntime_round_trip": (
            lambda: torch.from_dlpack(xrt.from_dlpack(t)),
            "torch.from_dlpack(xpuruntime.from_dlpack(t)): import into us, export back",
        ),
        "xpuruntime_import": (lambda: xrt.from_dlpack(t), "xpuruntime.from_dlpack(torch tensor)"),
        "xpuruntime_export": (lambda: torch.from_dlpack(ours_tensor), "torch.from_dlpack(our tensor)"),
        "xpuruntime_round_trip_to_torch": (
            lambda: xrt.from_dlpack(t).to_torch(),
            "xpuruntime.from_dlpack(t).to_torch(): both halves through the C exchange API",
        ),
        "xpuruntime_to_torch": (lambda: ours_tensor.to_torch(), "our_tensor.to_torch()"),
        "torch_utils_dlpack_round_trip": (
            lambda: torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(t)),
            "torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(t))",
        ),
        "torch_protocol_round_trip": (
            lambda: torch.from_dlpack(t),
            "torch.from_dlpack(t) on a torch tensor (__dlpack__ + import)",
        ),
    }
    out: dict[str, Any] = {
        "tensor": f"float32[1024] on {t.device}",
        "calls_per_sample": args.dlpack_calls,
        "samples": args.dlpack_samples,
        "results": {},
    }
    for name, (fn, what) in cases.items():
        for _ in range(1000):
            fn()
        core._dlpack_stats(reset=True)
        samples = [
            t_ / args.dlpack_calls * 1e6
            for t_ in timeit.repeat(fn, number=args.dlpack_calls, repeat=args.dlpack_samples)
        ]
        calls = args.dlpack_calls * args.dlpack_samples
        paths = {k: v / calls for k, v in core._dlpack_stats(reset=True).items() if v}
        out["results"][name] = {
            "median_us": statistics.median(samples),
            "min_us": min(samples),
            "measures": what,
            "our_paths_per_call": paths,
        }
        shown = ", ".join(f"{k}={v:g}" for k, v in paths.items()) or "-"
        print(
            f"  {name:<32} {statistics.median(samples):8.3f} us (min {min(samples):.3f})  paths: {shown}",
            flush=True,
        )
    out["goal_row"] = "xpuruntime_round_trip_to_torch"
    ours = out["results"][out["goal_row"]]["median_us"]
    out["ratio_ours_over_torch_utils"] = ours / out["results"]["torch_utils_dlpack_round_trip"]["median_us"]
    out["ratio_protocol_ours_over_torch_protocol"] = (
        out["results"]["xpuruntime_round_trip"]["median_us"]
        / out["results"]["torch_protocol_round_trip"]["median_us"]
    )
    out["goal"] = f"round trip (xpuruntime.from_dlpack(t).to_torch()) under {GOAL_DLPACK_US} us"
    out["goal_met"] = ours < GOAL_DLPACK_US
    return out


def device_slug(name: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    return s.replace("nvidia_", "", 1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=100_000)
    p.add_argument("--raw-pairs", type=int, default=100_000, help="pairs for the cudaMalloc rows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slots", type=int, default=64, help="live working set (slots)")
    p.add_argument("--min-bytes", type=int, default=512)
    p.add_argument("--max-bytes", type=int, default=64 << 20)
    p.add_argument("--dlpack-calls", type=int, default=20_000)
    p.add_argument("--dlpack-samples", type=int, default=7)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument(
        "--dlpack-cpu",
        action="store_true",
        help="only the DLPack section, with CPU tensors (no GPU needed); prints, writes --out if given",
    )
    args = p.parse_args()

    import torch
    import xpuruntime as xrt
    from xpuruntime import _core as core

    if args.dlpack_cpu:
        print(
            f"dlpack (cpu: {platform.processor() or platform.machine()}, torch {torch.__version__}):",
            flush=True,
        )
        dlpack = bench_dlpack(args, xrt, torch, device="cpu")
        if args.out:
            args.out.write_text(json.dumps({"dlpack_cpu": dlpack}, indent=2) + "\n")
        return 0

    if core.DeviceManager.instance().get_device_count() == 0 or not torch.cuda.is_available():
        print("no CUDA device:", core.DeviceManager.instance().cuda_unavailable_reason(), file=sys.stderr)
        return 2
    try:
        import cupy
    except ImportError:
        cupy = None

    info = core.DeviceManager.instance().get_device_info(0)
    print(
        f"device: {info.name} (cc {info.compute_capability_major}.{info.compute_capability_minor}, "
        f"driver {info.driver_version}, runtime {info.runtime_version})",
        flush=True,
    )
    torch.zeros(1, device="cuda")  # create torch's context before timing anything
    print("allocator (ns per alloc/free pair; passes):", flush=True)
    alloc = bench_allocators(args, core, torch, cupy)
    gc.collect()
    print("dlpack:", flush=True)
    try:
        dlpack = bench_dlpack(args, xrt, torch)
    except (RuntimeError, TypeError, ValueError, AssertionError, xrt.XpuRuntimeError) as e:
        dlpack = {"error": f"{type(e).__name__}: {e}", "goal_met": False}  # kept in the JSON
        print(f"  failed: {dlpack['error']}", flush=True)

    result = {
        "benchmark": "runtime foundation: caching allocator and DLPack round trip",
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": {
            "name": info.name,
            "compute_capability": f"{info.compute_capability_major}.{info.compute_capability_minor}",
            "sm_count": info.sm_count,
            "total_memory": info.total_memory,
            "pci_bus_id": info.pci_bus_id,
        },
        "versions": {
            "cuda_driver": info.driver_version,
            "cuda_runtime": info.runtime_version,
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "cupy": getattr(cupy, "__version__", None),
            "xpuruntime": getattr(xrt, "__version__", None),
            "python": platform.python_version(),
            "numpy": np.__version__,
        },
        "host": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "allocator": alloc,
        "dlpack": dlpack,
    }
    out = args.out or HERE / "results" / f"runtime_{device_slug(info.name)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")

    r = alloc["ratios"]
    print("\nsummary")
    if "cpp_warm_ours_over_torch" in r:
        print(
            f"  allocator, warm C++ loops: ours/torch = {r['cpp_warm_ours_over_torch']:.2f}x "
            f"(goal <= {GOAL_ALLOC_RATIO}x: {'met' if r['goal_met'] else 'NOT met'})"
        )
    if "py_warm_ours_over_torch_raw_C" in r:
        print(f"  allocator, warm Python loops: ours/torch._C = {r['py_warm_ours_over_torch_raw_C']:.2f}x")
    if "results" in dlpack:
        print(
            f"  DLPack round trip: {dlpack['results'][dlpack['goal_row']]['median_us']:.2f} us "
            f"(goal < {GOAL_DLPACK_US} us: {'met' if dlpack['goal_met'] else 'NOT met'}); "
            f"ours/torch.utils = {dlpack['ratio_ours_over_torch_utils']:.2f}x"
        )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
