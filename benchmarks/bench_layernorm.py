"""LayerNorm benchmark (issue 5): our fused kernels vs torch, and a device copy.

32768 x 4096 bf16 (and 8192 x 768, the GPT-2 width): forward (x read once, y
written once: 2 bytes moved per element) and backward (x and dy read, dx
written: 3 per element; weight/bias gradients are a small extra) in GB/s, next
to torch's F.layer_norm and a device-to-device copy (the bandwidth ceiling).
Correctness is checked against float64 first. Writes
benchmarks/results/layernorm_<device>.json and prints a table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics

import torch
import torch.nn.functional as F
import xpuruntime
from xpuruntime.pytorch.ops.layernorm import layer_norm_bwd, layer_norm_fwd


def bench_ms(fn, iters: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def env() -> dict:
    return {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "xpuruntime": xpuruntime.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def run_case(rows, cols, iters):
    torch.manual_seed(0)
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16) * 2 + 1
    w = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    n = x.numel() * x.element_size()
    res = {"rows": rows, "cols": cols, "dtype": "bfloat16"}
    # correctness on the benchmarked shape
    y, mean, rstd = layer_norm_fwd(x, [cols], w, b, 1e-5)
    dx, _, _ = layer_norm_bwd(dy, x, [cols], mean, rstd, w, True, True)
    xd, wd, bd = (t.double().requires_grad_() for t in (x[:256], w, b))
    ref = F.layer_norm(xd, (cols,), wd, bd, 1e-5)
    ref.backward(dy[:256].double())
    res["rel_err"] = {"y": rel(y[:256], ref), "dx": rel(dx[:256], xd.grad)}
    # timings
    src = torch.empty(n // 2 * 4, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    res["copy_GBps"] = 2 * src.numel() * 2 / bench_ms(lambda: dst.copy_(src), iters) / 1e6
    src = dst = None
    res["ours_fwd_ms"] = bench_ms(lambda: layer_norm_fwd(x, [cols], w, b, 1e-5), iters)
    res["torch_fwd_ms"] = bench_ms(lambda: F.layer_norm(x, (cols,), w, b, 1e-5), iters)
    res["ours_bwd_ms"] = bench_ms(lambda: layer_norm_bwd(dy, x, [cols], mean, rstd, w, True, True), iters)
    xr, wr, br = (t.detach().requires_grad_() for t in (x, w, b))
    yr = F.layer_norm(xr, (cols,), wr, br, 1e-5)
    res["torch_bwd_ms"] = bench_ms(
        lambda: torch.autograd.grad(yr, (xr, wr, br), dy, retain_graph=True), iters
    )
    for who in ("ours", "torch"):
        res[f"{who}_fwd_GBps"] = 2 * n / res[f"{who}_fwd_ms"] / 1e6
        res[f"{who}_bwd_GBps"] = 3 * n / res[f"{who}_bwd_ms"] / 1e6
    res["fwd_speedup"] = res["torch_fwd_ms"] / res["ours_fwd_ms"]
    res["bwd_speedup"] = res["torch_bwd_ms"] / res["ours_bwd_ms"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args()
    results = {
        "benchmark": "layernorm",
        "env": env(),
        "cases": [run_case(32768, 4096, args.iters), run_case(8192, 768, args.iters)],
    }
    print(
        f"{'shape':14s} {'ours fwd GB/s':>14s} {'torch fwd':>10s} {'x':>6s} {'ours bwd GB/s':>14s} "
        f"{'torch bwd':>10s} {'x':>6s} {'copy GB/s':>10s}"
    )
    for c in results["cases"]:
        print(
            f"{c['rows']}x{c['cols']:<8d} {c['ours_fwd_GBps']:14.0f} {c['torch_fwd_GBps']:10.0f} "
            f"{c['fwd_speedup']:6.2f} {c['ours_bwd_GBps']:14.0f} {c['torch_bwd_GBps']:10.0f} "
            f"{c['bwd_speedup']:6.2f} {c['copy_GBps']:10.0f}   rel err {c['rel_err']}"
        )
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"layernorm_{results['env']['device'].replace(' ', '_')}.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
