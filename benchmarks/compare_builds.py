"""Compare two builds' benchmark results taken in one run on one machine.

A restructuring must not change speed. ``scripts/gpu_compare.sh`` runs the GPU
benchmarks (attention, LayerNorm, the GPT-2 training step) alternately on a baseline
tree and on the current tree, each run writing its results JSON into its own folder;
this script reads those folders, takes each figure's median over the runs of each
build, and writes one results file with the ratio current / baseline per figure and
a top-level ``goals`` list (every figure within the tolerance).

Also reads bench_native_cuda.py (``native_cuda_*.json``) and bench_native_cpu.py
(``native_cpu*.json``) results, so the native engine's A/B goes through it too.

Usage: python3 benchmarks/compare_builds.py --base DIR[,DIR...] --head DIR[,DIR...]
           --tolerance 0.03 --out benchmarks/results/seam_compare_<device>.json
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import statistics
from typing import Any


def _figures(bench: str, d: dict[str, Any]) -> dict[str, float]:
    """The figures a benchmark file holds that a restructuring must keep (lower is better)."""
    out: dict[str, float] = {}
    if bench == "attention":
        for c in d["cases"]:
            tag = f"B{c['B']}_H{c['H']}_S{c['S']}_D{c['D']}_{'causal' if c['causal'] else 'full'}"
            for k in ("flash_v2", "auto"):
                e = c["kernels"].get(k, {})
                for m in ("fwd_ms", "fwdbwd_ms"):
                    if m in e:
                        out[f"attention {tag} {k} {m}"] = e[m]
        for k, v in d.get("routing_overhead_us", {}).items():
            out[f"attention host {k}"] = v
    elif bench == "layernorm":
        for c in d["cases"]:
            tag = f"{c['rows']}x{c['cols']}"
            for m in (
                "ours_fwd_ms",
                "ours_bwd_ms",
                "ours_fwd_call_ms",
                "ours_bwd_call_ms",
                "ours_fwd_host_us",
                "ours_bwd_host_us",
            ):
                if m in c:
                    out[f"layernorm {tag} {m}"] = c[m]
    elif bench == "layernorm_host":
        # Host microseconds per call, and the same over torch's own F.layer_norm in that
        # process (a build-independent yardstick for the process's CPU state).
        for c in d["cases"]:
            tag = f"{c['rows']}x{c['cols']}"
            for op in ("fwd", "bwd"):
                out[f"layernorm {tag} ours_{op}_host_us"] = c[f"ours_{op}_host_us"]
                out[f"layernorm {tag} ours_{op}_host_over_torch"] = (
                    c[f"ours_{op}_host_us"] / c[f"torch_{op}_host_us"]
                )
    elif bench == "gpt2_step":
        for m in ("policy_graph_ms", "policy_eager_ms"):
            out[f"gpt2_step {m}"] = d[m]
    elif bench == "native_cuda":
        # bench_native_cuda.py: the native CUDA engine per model (plans run through the
        # execution provider), and over torch's CUDA graph of the same process.
        for m in d["models"]:
            ms = m.get("ms", {})
            if "native" in ms:
                out[f"native_cuda {m['model']} native_ms"] = ms["native"]
                if ms.get("torch_graph"):
                    out[f"native_cuda {m['model']} native_over_torch_graph"] = (
                        ms["native"] / ms["torch_graph"]
                    )
    elif bench.startswith("native_cpu"):
        # bench_native_cpu.py: the native CPU engine's p50 per model, and over ONNX Runtime's
        # p50 of the same process (a build-independent yardstick for the machine's state).
        for r in d["results"]:
            if r.get("native_p50_ms"):
                out[f"native_cpu {r['model']} native_p50_ms"] = r["native_p50_ms"]
            if r.get("ratio_native_over_ort"):
                out[f"native_cpu {r['model']} native_over_ort"] = r["ratio_native_over_ort"]
    return out


def _collect(dirs: list[str]) -> tuple[dict[str, list[float]], dict[str, Any]]:
    runs: dict[str, list[float]] = {}
    env: dict[str, Any] = {}
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "*.json"))):
            bench = os.path.basename(path)[: -len(".json")].split("_NVIDIA")[0]
            if bench.startswith("native_cuda"):  # one file per model: native_cuda_<model>.json
                bench = "native_cuda"
            with open(path) as f:
                data = json.load(f)
            if "env" in data:
                env = data["env"]
            elif "device" in data or "machine" in data:
                # bench_native_cuda.py (device) and bench_native_cpu.py (machine): the
                # machine, date and versions at the top of the file.
                env = {k: data[k] for k in ("device", "machine", "date", "versions") if k in data}
            for k, v in _figures(bench, data).items():
                runs.setdefault(k, []).append(float(v))
    return runs, env


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="comma-separated result folders of the baseline build")
    ap.add_argument("--head", required=True, help="comma-separated result folders of the current build")
    ap.add_argument("--base-rev", default="")
    ap.add_argument("--head-rev", default="")
    ap.add_argument("--tolerance", type=float, default=0.03)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    base, env = _collect(args.base.split(","))
    head, env_h = _collect(args.head.split(","))
    env = env_h or env
    rows, goals = [], []
    print(f"{'figure':64s} {'base':>10s} {'head':>10s} {'head/base':>10s}")
    for k in sorted(set(base) & set(head)):
        b, h = statistics.median(base[k]), statistics.median(head[k])
        ratio = h / b if b > 0 else float("nan")
        # The routed attention calls' host microseconds move with host load (one unpinned
        # process per build); they are reported, the goal is on device and step times. The
        # LayerNorm host figures come from pinned, alternating runs and are gated.
        gated = not k.startswith("attention host")
        met = ratio <= 1.0 + args.tolerance
        rows.append({"figure": k, "base": base[k], "head": head[k], "ratio_median": ratio, "gated": gated})
        if gated:
            goals.append(
                {
                    "name": f"{k}: head / base",
                    "figure": round(ratio, 4),
                    "target": f"<= {1 + args.tolerance}",
                    "met": met,
                }
            )
        print(f"{k:64s} {b:10.4f} {h:10.4f} {ratio:10.3f}{'' if met or not gated else '  MISSED'}")
    result = {
        "benchmark": "compare_builds",
        "date": datetime.date.today().isoformat(),
        "device": env.get("device") or (env.get("machine") or {}).get("cpu_model", ""),
        "env": env,
        "base_rev": args.base_rev,
        "head_rev": args.head_rev,
        "tolerance": args.tolerance,
        "goals": goals,
        "figures": rows,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", args.out, "| goals met:", sum(g["met"] for g in goals), "of", len(goals))


if __name__ == "__main__":
    main()
