"""Kernel-time breakdown of the GPT-2-small training step (issue 5): eager torch vs
the same step under the policy {matmul: cublasLt, attention: flash_v2, layernorm:
fused} (run eagerly: the captured step replays the same kernels). torch.profiler's
CUDA activity over 3 steps after 3 warm-up steps; per kernel the device time per
step and the launches per step. Writes benchmarks/results/gpt2_profile_<device>.json.
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
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
    res["eager_torch"] = kernels(
        make_step(model, opt, idx, tgt, lambda: torch.autocast("cuda", dtype=torch.bfloat16))
    )
    del model, opt
    torch.cuda.empty_cache()
    model, opt, idx, tgt = setup(8, 1024)
    xrt_torch.set_kernel_policy(**POLICY)
    try:
        step = make_step(model, opt, idx, tgt, lambda: xrt_torch.autocast(dtype=torch.bfloat16))
        res["policy"] = kernels(step)
    finally:
        xrt_torch.clear_kernel_policy()
    for side in ("eager_torch", "policy"):
        print(f"== {side}: {res[side]['total_kernel_ms_per_step']:.2f} ms of kernels per step")
        for r in res[side]["kernels"][:25]:
            print(f"{r['ms_per_step']:8.3f} ms {r['calls_per_step']:6.1f}x  {r['kernel'][:110]}")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"gpt2_profile_{res['env']['device'].replace(' ', '_')}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
