"""Attention benchmark (issue 5): our flash_v2 kernels vs torch's SDPA backends.

At B=4 H=16 S=4096 D=128 bf16 (and the causal case, and D=64 with H=32), side
by side in one run: forward and forward+backward of xpuruntime's fused_attention
(flash_v2) and of torch's FLASH, EFFICIENT and CUDNN backends, plus
``attention="auto"`` under ``auto_strategy="best_performance"`` (the routed
F.scaled_dot_product_attention picks the fastest per shape). Correctness first:
every kernel's output is checked against a float64 reference on a slice.
Writes benchmarks/results/attention_<device>.json and prints a table.

Usage: python benchmarks/bench_attention.py [--iters 30] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import time

import torch
import torch.nn.functional as F
import xpuruntime
import xpuruntime.pytorch as xrt_torch
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "torch_flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}


def bench_ms(fn, iters: int, warmup: int = 5, calls: int = 5, raw: bool = False):
    """Median device time of one call in a steady stream of calls.

    Each sample enqueues one call *before* the start event and times the next
    ``calls`` calls: the start event then waits behind a busy stream, so the host's
    per-call work (Python, the routing mode) overlaps a running kernel for every
    timed call, as it does in a training loop, and what is measured is the kernels'
    throughput. A host cost larger than the kernel still shows, since the stream
    then runs dry between calls. (Results before 2026-11-22 03:40 UTC timed single
    calls between two events; before this change the first of the ``calls`` calls
    paid its host work with the device idle.) The routing overhead itself is
    measured separately, on a tiny case, by ``routing_overhead_us``. ``raw``: the
    samples instead of their median.
    """
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fn()
        s.record()
        for _ in range(calls):
            fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / calls)
    return times if raw else statistics.median(times)


def routing_overhead_us(reps: int = 2000) -> dict:
    """Host microseconds per F.scaled_dot_product_attention call on a tiny case
    (1x1x16x64 bf16, where the kernel is negligible): plain torch, and routed under
    attention="cudnn" and attention="flash_v2" policies. The difference is what the
    routing mode adds per call (call parsing, policy lookup, decision cache)."""
    q = torch.randn(1, 1, 16, 64, device="cuda", dtype=torch.bfloat16)

    def per_call() -> float:
        for _ in range(50):
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(reps):
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / reps * 1e6

    res = {"plain_torch_us": per_call()}
    for kernel in ("cudnn", "flash_v2"):
        xrt_torch.set_kernel_policy(attention=kernel)
        try:
            res[f"routed_{kernel}_us"] = per_call()
        finally:
            xrt_torch.clear_kernel_policy()
    return res


def env() -> dict:
    return {
        "device": torch.cuda.get_device_name(),
        "capability": list(torch.cuda.get_device_capability()),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "xpuruntime": xpuruntime.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def check(out, q, k, v, causal):
    s = slice(0, 1)
    ref = F.scaled_dot_product_attention(
        q[s, :2].double(), k[s, :2].double(), v[s, :2].double(), is_causal=causal
    )
    got = out[s, :2].double()
    return ((got - ref).norm() / ref.norm()).item()


def run_case(B, H, S, D, causal, iters):
    """Every kernel measured in interleaved samples: sample i of every kernel is taken
    before sample i + 1 of any, in an order rotated each time (median over all
    samples). Clock drift and power throttling then hit every kernel alike; with
    whole rounds per kernel a kernel that ran right after a power-hungry one was
    measured at lower clocks (auto, which runs cudnn, right after cudnn read 3%
    slower than cudnn itself in results before 2026-11-23)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    dout = torch.randn_like(q)
    flops = 4 * B * H * S * S * D / (2 if causal else 1)
    res = {"B": B, "H": H, "S": S, "D": D, "causal": causal, "dtype": "bfloat16", "kernels": {}}

    def unrouted(fn):
        # The policy (attention="auto") stays set for the whole case; the other
        # kernels run with torch-function modes disabled so it does not reroute them.
        def call(*a):
            with torch._C.DisableTorchFunction():
                return fn(*a)

        return call

    fwds = {
        "flash_v2": unrouted(lambda q_, k_, v_: xrt_torch.ops.fused_attention(q_, k_, v_, is_causal=causal))
    }
    for name, be in BACKENDS.items():

        def f(q_, k_, v_, be=be):
            with sdpa_kernel([be]):
                return F.scaled_dot_product_attention(q_, k_, v_, is_causal=causal)

        fwds[name] = unrouted(f)
    # attention="auto" + best_performance: the routed call itself (timing happens on its first call)
    fwds["auto"] = lambda q_, k_, v_: F.scaled_dot_product_attention(q_, k_, v_, is_causal=causal)
    xrt_torch.set_kernel_policy(attention="auto", auto_strategy="best_performance")
    try:
        samples: dict[str, dict[str, list[float]]] = {}
        for name, fwd in list(fwds.items()):
            try:
                with torch.no_grad():
                    out = fwd(q, k, v)
            except RuntimeError as e:
                res["kernels"][name] = {"error": str(e)[:200]}
                del fwds[name]
                continue
            res["kernels"][name] = {"rel_err": check(out, q, k, v, causal)}
            samples[name] = {"fwd": [], "fb": []}
        steps = {}
        for name, fwd in fwds.items():
            leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]

            def fb(fwd=fwd, leaves=leaves):
                fwd(*leaves).backward(dout)

            steps[name] = (lambda fwd=fwd: fwd(q, k, v), fb)
        names = list(fwds)
        shuffle = random.Random(B * H * S + D + causal)
        for _ in range(max(iters, 8)):
            # A fresh order per sample: a fixed cyclic order (even rotated) would
            # always put the same kernel right after the same neighbour.
            for name in shuffle.sample(names, len(names)):
                fwd_step, fb_step = steps[name]
                with torch.no_grad():
                    samples[name]["fwd"] += bench_ms(fwd_step, 1, warmup=1, raw=True)
                samples[name]["fb"] += bench_ms(fb_step, 1, warmup=1, raw=True)
        picks = [
            d for d in xrt_torch.decision_log() if d.op == "attention" and list(d.shapes[0]) == [B, H, S, D]
        ]
        res["auto_picks"] = sorted({d.chosen for d in picks})
        res["auto_timings_ms"] = [d.timings for d in picks]
    finally:
        xrt_torch.clear_kernel_policy()
    for name, smp in samples.items():
        entry = res["kernels"][name]
        entry["fwd_ms"] = statistics.median(smp["fwd"])
        entry["fwdbwd_ms"] = statistics.median(smp["fb"])
        entry["fwd_tflops"] = flops / entry["fwd_ms"] / 1e9
        entry["fwdbwd_tflops"] = 3.5 * flops / entry["fwdbwd_ms"] / 1e9  # backward = 2.5x forward FLOPs
    ok = [e for n, e in res["kernels"].items() if n in BACKENDS and "fwd_ms" in e]
    ours = res["kernels"]["flash_v2"]
    best_fwd = min(e["fwd_ms"] for e in ok)
    best_fb = min(e["fwdbwd_ms"] for e in ok)
    flash = res["kernels"].get("torch_flash", {})
    res["ratios"] = {
        "flash_v2_vs_torch_flash_fwd": flash.get("fwd_ms", float("nan")) / ours["fwd_ms"],
        "flash_v2_vs_torch_flash_fwdbwd": flash.get("fwdbwd_ms", float("nan")) / ours["fwdbwd_ms"],
        "auto_vs_best_torch_fwd": best_fwd / res["kernels"]["auto"]["fwd_ms"],
        "auto_vs_best_torch_fwdbwd": best_fb / res["kernels"]["auto"]["fwdbwd_ms"],
    }
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args()
    cases = [
        (4, 16, 4096, 128, False),
        (4, 16, 4096, 128, True),
        (4, 32, 4096, 64, False),
        (4, 32, 4096, 64, True),
    ]
    results = {"benchmark": "attention", "env": env(), "cases": [run_case(*c, args.iters) for c in cases]}
    results["routing_overhead_us"] = routing_overhead_us()
    print(
        f"{'case':34s} {'kernel':12s} {'fwd ms':>8s} {'TFLOP/s':>8s} {'f+b ms':>8s} {'TFLOP/s':>8s} {'rel err':>8s}"
    )
    for c in results["cases"]:
        tag = f"B={c['B']} H={c['H']} S={c['S']} D={c['D']} {'causal' if c['causal'] else 'full'}"
        for name, e in c["kernels"].items():
            if "error" in e:
                print(f"{tag:34s} {name:12s} error: {e['error'][:60]}")
                continue
            print(
                f"{tag:34s} {name:12s} {e['fwd_ms']:8.3f} {e['fwd_tflops']:8.1f} {e['fwdbwd_ms']:8.3f} "
                f"{e['fwdbwd_tflops']:8.1f} {e['rel_err']:8.1e}"
            )
        print(
            f"{tag:34s} ratios: "
            + ", ".join(f"{k}={v:.3f}" for k, v in c["ratios"].items())
            + f"  auto picked {c['auto_picks']}"
        )
    print(
        "host us per call (tiny case):", {k: round(v, 1) for k, v in results["routing_overhead_us"].items()}
    )
    os.makedirs(args.out, exist_ok=True)
    name = results["env"]["device"].replace(" ", "_")
    path = os.path.join(args.out, f"attention_{name}.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
