"""Kernel-time breakdown of the GPT-2-small training step (issues 5, 31): eager torch vs
the same step under the policy {matmul: cublasLt, attention: flash_v2, layernorm:
fused} (run eagerly: the captured step replays the same kernels). torch.profiler's
CUDA activity over 3 steps after 3 warm-up steps; per kernel the device time per
step and the launches per step. ``--host`` adds the host side (issue 31: the eager
policy step is host-bound): CPU time per step by op, CUDA runtime call and autograd node,
on all threads; then it writes benchmarks/results/gpt2_profile_host_<device>.json, else
benchmarks/results/gpt2_profile_<device>.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys

import torch
import xpuruntime
import xpuruntime.pytorch as xrt_torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpt2_step import POLICY, setup

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu"))
from gpt2_model import make_step

STEPS = 3


def kernels(step) -> dict:
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
    rows = [
        {
            "kernel": e.key,
            "ms_per_step": e.self_device_time_total / STEPS / 1e3,
            "calls_per_step": e.count / STEPS,
        }
        for e in prof.key_averages()
        if e.self_device_time_total > 0
    ]
    rows.sort(key=lambda r: -r["ms_per_step"])
    return {"total_kernel_ms_per_step": sum(r["ms_per_step"] for r in rows), "kernels": rows[:60]}


def host(step) -> dict:
    """Host (CPU) time per step by op, all threads (the autograd engine's device thread,
    where a CUDA backward runs, included): torch.profiler's CPU activity over 3 steps.
    Rows: aten ops, CUDA runtime calls (cudaLaunchKernel, cudaMalloc, cudaStreamSynchronize,
    ...), autograd nodes (``autograd::engine::evaluate_function: <Node>``: the node's whole
    host time, its Python backward included) and xpuruntime's routed calls."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
    rows = [
        {
            "name": e.key,
            "self_cpu_ms_per_step": e.self_cpu_time_total / STEPS / 1e3,
            "cpu_total_ms_per_step": e.cpu_time_total / STEPS / 1e3,
            "calls_per_step": e.count / STEPS,
        }
        for e in prof.key_averages()
    ]
    by_self = sorted(rows, key=lambda r: -r["self_cpu_ms_per_step"])[:40]
    nodes = sorted(
        (r for r in rows if r["name"].startswith("autograd::engine::evaluate_function")),
        key=lambda r: -r["cpu_total_ms_per_step"],
    )[:25]
    return {"by_self_cpu": by_self, "autograd_nodes_by_total_cpu": nodes}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument(
        "--host",
        action="store_true",
        help="also profile host (CPU) time per step by op and autograd node, all threads",
    )
    args = ap.parse_args()
    res = {
        "benchmark": "gpt2_step kernel profile",
        "batch": 8,
        "seq": 1024,
        "env": {
            "device": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "xpuruntime": xpuruntime.__version__,
            "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        },
    }
    model, opt, idx, tgt = setup(8, 1024)
    step = make_step(model, opt, idx, tgt, lambda: torch.autocast("cuda", dtype=torch.bfloat16))
    res["eager_torch"] = kernels(step)
    if args.host:
        res["host_eager_torch"] = host(step)
    del model, opt
    torch.cuda.empty_cache()
    model, opt, idx, tgt = setup(8, 1024)
    xrt_torch.set_kernel_policy(**POLICY)
    try:
        step = make_step(model, opt, idx, tgt, lambda: xrt_torch.autocast(dtype=torch.bfloat16))
        res["policy"] = kernels(step)
        if args.host:
            res["host_policy"] = host(step)
    finally:
        xrt_torch.clear_kernel_policy()
    for side in ("eager_torch", "policy"):
        print(f"== {side}: {res[side]['total_kernel_ms_per_step']:.2f} ms of kernels per step")
        for r in res[side]["kernels"][:25]:
            print(f"{r['ms_per_step']:8.3f} ms {r['calls_per_step']:6.1f}x  {r['kernel'][:110]}")
    for side in ("host_eager_torch", "host_policy"):
        if side in res:
            print(f"== {side}: self CPU ms per step (all threads)")
            for r in res[side]["by_self_cpu"][:20]:
                print(f"{r['self_cpu_ms_per_step']:8.3f} ms {r['calls_per_step']:7.1f}x  {r['name'][:100]}")
            print(f"== {side}: autograd nodes, total CPU ms per step")
            for r in res[side]["autograd_nodes_by_total_cpu"][:12]:
                print(f"{r['cpu_total_ms_per_step']:8.3f} ms {r['calls_per_step']:7.1f}x  {r['name'][:100]}")
    os.makedirs(args.out, exist_ok=True)
    tag = "_host" if args.host else ""
    path = os.path.join(args.out, f"gpt2_profile{tag}_{res['env']['device'].replace(' ', '_')}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
