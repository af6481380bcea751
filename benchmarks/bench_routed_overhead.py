"""Host time of a routed torch call against the same plain torch call (issue 17 §1, §4).

For ``F.linear`` (op ``matmul``), ``F.scaled_dot_product_attention`` (``attention``)
and ``F.layer_norm`` (``layernorm``) on tiny shapes, so the host cost dominates:

- ``torch``: the call with no policy set;
- ``routed_torch``: the call under a policy that names torch's own kernel
  (``matmul='torch'``, ``attention='torch'``, ``layernorm='torch'``): the same kernel
  runs, so the difference is what routing costs (mode, case lookup, launch);
- ``routed_ours`` (CUDA only): under ``{matmul: cublasLt, attention: flash_v2,
  layernorm: fused}``, our kernels. On CPU tensors those names run float reference
  implementations, so that row measures the reference, not routing, and is left out.

The variants alternate in rounds (the order rotating each round) so drift in load
hits all alike; a figure is the median over rounds of µs per call in a block of
calls (CUDA: wall time, the block ends with a synchronize, and the shapes are small
enough for the host to be the bottleneck; CPU: by default the thread's CPU time,
which a machine shared with other work disturbs far less than the wall clock, as
everything here runs on the calling thread with one torch thread). Goal (issue 17):
routed ≤ torch + 5 µs.

Usage: PYTHONPATH=python XRT_BUILD_DIR=build python benchmarks/bench_routed_overhead.py
       [--rounds 15] [--calls 2000] [--out benchmarks/results] [--profile PATH]
       [--baseline DIR]
``--profile PATH`` also writes a cProfile of the routed calls (top functions).
``--baseline DIR`` adds ``routed_torch_baseline``: the same policy through an older
``xpuruntime/pytorch`` package (DIR holds its ``__init__.py``, e.g. from
``git archive REV python/xpuruntime/pytorch | tar -x -C /tmp/base``, DIR
``/tmp/base/python/xpuruntime/pytorch``), loaded beside this one and interleaved in
the same rounds, so a change is measured before/after in one process.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import importlib.util
import io
import json
import os
import platform
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
import xpuruntime
import xpuruntime.pytorch as xrt_torch

GOAL_US = 5.0
TORCH_POLICY = {"matmul": "torch", "attention": "torch", "layernorm": "torch"}
OUR_POLICY = {"matmul": "cublasLt", "attention": "flash_v2", "layernorm": "fused"}


def make_calls(device: str) -> dict[str, Callable[[], Any]]:
    """The three routed calls on tiny tensors of ``device`` (no autograd)."""
    g = torch.Generator().manual_seed(0)
    dtype = torch.float16 if device == "cuda" else torch.float32

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    x, w, b = rnd(8, 64), rnd(64, 64), rnd(64)
    q = rnd(1, 2, 16, 64)
    lw, lb = rnd(64), rnd(64)
    return {
        "matmul (F.linear 8x64x64)": lambda: F.linear(x, w, b),
        "attention (SDPA 1x2x16x64 causal)": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True),
        "layernorm (F.layer_norm 8x64)": lambda: F.layer_norm(x, (64,), lw, lb),
    }


CLOCKS = {"wall": time.perf_counter_ns, "thread": time.thread_time_ns}


def block_us(fn: Callable[[], Any], calls: int, sync: Callable[[], None], clock: Callable[[], int]) -> float:
    t0 = clock()
    for _ in range(calls):
        fn()
    sync()
    return (clock() - t0) / calls / 1e3


def load_baseline(path: str) -> Any:
    """An older xpuruntime.pytorch package from ``path``, as ``xpuruntime._baseline_pytorch``
    (its relative imports resolve inside it; ``from .. import`` reaches this xpuruntime)."""
    name = "xpuruntime._baseline_pytorch"
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(path, "__init__.py"), submodule_search_locations=[path]
    )
    if spec is None or spec.loader is None:
        raise SystemExit(f"--baseline {path}: no package __init__.py there")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def measure(
    device: str,
    variants: list[str],
    rounds: int,
    calls: int,
    clock: Callable[[], int],
    baseline: Any = None,
) -> dict[str, dict[str, Any]]:
    """{call: {variant: {median_us, min_us, p10_us, p90_us}}} with the variants interleaved."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    policies = {
        "torch": None,
        "routed_torch": (xrt_torch, TORCH_POLICY),
        "routed_ours": (xrt_torch, OUR_POLICY),
        "routed_torch_baseline": (baseline, TORCH_POLICY),
    }
    fns = make_calls(device)
    samples: dict[str, dict[str, list[float]]] = {n: {v: [] for v in variants} for n in fns}

    def under(variant: str, fn: Callable[[], Any], n: int) -> float:
        if policies[variant] is None:
            return block_us(fn, n, sync, clock)
        module, p = policies[variant]
        module.set_kernel_policy(**p)
        try:
            fn()  # the case's first call decides (setting a policy forgets the cases): untimed
            return block_us(fn, n, sync, clock)
        finally:
            module.clear_kernel_policy()

    for name, fn in fns.items():
        for v in variants:  # warm up: first-call decisions, lazy imports, allocator caches
            under(v, fn, 200)
        for r in range(rounds):
            for v in variants[r % len(variants) :] + variants[: r % len(variants)]:
                samples[name][v].append(under(v, fn, calls))
    out: dict[str, dict[str, Any]] = {}
    for name, per in samples.items():
        out[name] = {}
        for v, s in per.items():
            s = sorted(s)
            out[name][v] = {
                "median_us": statistics.median(s),
                "min_us": s[0],  # the round least disturbed by other work on the machine
                "p10_us": s[len(s) // 10],
                "p90_us": s[(9 * len(s)) // 10],
            }
    return out


def write_profile(path: str, device: str, calls: int) -> None:
    """cProfile of ``calls`` routed calls of each kind under the torch-kernel policy."""
    fns = make_calls(device)
    lines = []
    for policy_name, policy in (("torch kernels", TORCH_POLICY), ("our kernels", OUR_POLICY)):
        xrt_torch.set_kernel_policy(**policy)
        try:
            for fn in fns.values():
                for _ in range(200):
                    fn()
            prof = cProfile.Profile(time.thread_time_ns, 1e-9)  # CPU time: robust to a busy machine
            prof.enable()
            for _ in range(calls):
                for fn in fns.values():
                    fn()
            prof.disable()
        finally:
            xrt_torch.clear_kernel_policy()
        s = io.StringIO()
        st = pstats.Stats(prof, stream=s).sort_stats("tottime")
        st.print_stats(18)
        text = s.getvalue()
        text = text[text.find("ncalls") :] if "ncalls" in text else text
        lines.append(
            f"## policy {policy} ({policy_name}); {calls} calls of each of the 3 ops, "
            f"sorted by own time (tottime); per-call µs = tottime / {calls * 3} * 1e6\n"
            f"total profiled thread CPU time {st.total_tt * 1e6 / (calls * 3):.2f} µs per call "
            "(cProfile's own cost included)\n" + text
        )
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--profile", default="", help="also write a cProfile of routed calls to this file")
    ap.add_argument("--clock", choices=sorted(CLOCKS), help="default: wall on CUDA, thread on CPU")
    ap.add_argument("--baseline", default="", help="an older xpuruntime/pytorch package folder to compare")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    clock = args.clock or ("wall" if device == "cuda" else "thread")
    variants = ["torch", "routed_torch"] + (["routed_ours"] if device == "cuda" else [])
    baseline = load_baseline(args.baseline) if args.baseline else None
    if baseline is not None:
        variants.append("routed_torch_baseline")
    results = measure(device, variants, args.rounds, args.calls, CLOCKS[clock], baseline)
    goals = []
    for name, per in results.items():
        base = per["torch"]["median_us"]
        for v in variants[1:]:
            over = per[v]["median_us"] - base
            per[v]["overhead_us"] = over
            if v == "routed_torch_baseline":
                continue  # a reference figure, not a goal
            goals.append(
                {
                    "name": f"{name}: {v} host overhead",
                    "figure": round(over, 3),
                    "target": f"<= {GOAL_US} us over plain torch",
                    "met": over <= GOAL_US,
                }
            )
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    doc = {
        "benchmark": "bench_routed_overhead",
        "what": "host µs per routed call vs the same plain torch call (tiny shapes), median over rounds",
        "device": name,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": {
            "xpuruntime": getattr(xpuruntime, "__version__", ""),
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "torch_threads": args.threads,
            "load_average_1_5_15": list(os.getloadavg()),
        },
        "clock": clock,
        "baseline": args.baseline or None,
        "rounds": args.rounds,
        "calls_per_round": args.calls,
        "goals": goals,
        "results": results,
    }
    os.makedirs(args.out, exist_ok=True)
    tag = "cpu" if device == "cpu" else name.replace(" ", "_")
    path = os.path.join(args.out, f"routed_overhead_{tag}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    for g in goals:
        print(f"{g['name']}: {g['figure']:+.2f} us ({'met' if g['met'] else 'MISSED'})")
    for n, per in results.items():
        print(
            n,
            {v: round(x["median_us"], 2) for v, x in per.items()},
            "min:",
            {v: round(x["min_us"], 2) for v, x in per.items()},
        )
    print("wrote", path)
    if args.profile:
        write_profile(args.profile, device, 2000)
        print("wrote", args.profile)


if __name__ == "__main__":
    sys.exit(main())
