"""Conv kernel ``onednn`` against the native engine's default Conv kernels and ONNX
Runtime: torchvision convolutional networks (random weights, batch 1, 224x224,
exported by ``torch.onnx.export`` at opset 17 inside the run), at the same thread
count, interleaved (each round runs every variant once, in rotating order).

    PYTHONPATH=python XRT_BUILD_DIR=build/<dir> python3 benchmarks/bench_onednn_conv.py \
        [--threads 2] [--rounds 15] [--models resnet18,...] [--out results/onednn_conv.json]

Prints a table (median ms per variant, ratios to ORT) and writes JSON with the load
average (a busy machine makes every number noisy). The priority of the ``onednn``
kernel (cpp/src/backends/cpu/kernels/onednn/onednn_conv.cpp) quotes these figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

MODELS = ["resnet18", "mobilenet_v3_large", "efficientnet_b0", "convnext_tiny", "densenet121"]


def export(name: str, out_dir: Path) -> Path:
    """Exports torchvision's ``name`` (random weights, eval mode) to ONNX, cached."""
    import torch
    import torchvision

    path = out_dir / f"{name}.onnx"
    if not path.exists():
        torch.manual_seed(0)
        model = getattr(torchvision.models, name)(weights=None).eval()
        x = torch.randn(1, 3, 224, 224)
        with torch.no_grad():
            torch.onnx.export(model, (x,), str(path), opset_version=17, input_names=["x"], dynamo=False)
    return path


def make_runners(path: Path, threads: int) -> dict[str, Any]:
    """One callable per variant: native (default kernels), native with conv pinned to
    onednn, ONNX Runtime."""
    import onnxruntime as ort
    import xpuruntime as xrt

    model = path.read_bytes()
    ep = xrt.ExecutionPolicy(threads=threads)
    runners: dict[str, Any] = {}
    variants = [
        ("native", None),
        ("native_onednn", xrt.KernelPolicy(conv="onednn", mode="require")),
        # oneDNN for every Conv but the depthwise ones (our cpu_depthwise keeps those).
        ("native_dw_onednn", xrt.KernelPolicy(conv=["cpu_depthwise", "onednn"])),
    ]
    for label, kp in variants:
        t0 = time.perf_counter()
        sess = xrt.InferenceSession(model, device="cpu", engine="native", kernel_policy=kp, exec_policy=ep)
        runners[label] = (lambda feeds, s=sess: next(iter(s.run(feeds).values())), time.perf_counter() - t0)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    osess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    runners["ort"] = (lambda feeds: osess.run(None, feeds)[0], 0.0)
    return runners


def bench(name: str, out_dir: Path, threads: int, rounds: int) -> dict[str, Any]:
    path = export(name, out_dir)
    runners = make_runners(path, threads)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    feeds = {"x": x}
    outs = {k: np.asarray(r(feeds)) for k, (r, _) in runners.items()}
    ref = outs["ort"]
    errs = {k: float(np.abs(v - ref).max() / max(1e-12, np.abs(ref).max())) for k, v in outs.items()}
    times: dict[str, list[float]] = {k: [] for k in runners}
    keys = list(runners)
    for i in range(rounds):
        for k in keys[i % len(keys) :] + keys[: i % len(keys)]:
            t0 = time.perf_counter()
            runners[k][0](feeds)
            times[k].append((time.perf_counter() - t0) * 1e3)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "model": name,
        "median_ms": med,
        "ratio_to_ort": {k: med[k] / med["ort"] for k in med},
        "onednn_over_default": med["native_onednn"] / med["native"],
        "compile_s": {k: r[1] for k, r in runners.items() if r[1]},
        "max_rel_err_vs_ort": errs,
        "loadavg": os.getloadavg(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--out", default="")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "xrt_onednn_bench"))
    args = ap.parse_args()
    out_dir = Path(args.cache)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    print(
        f"{'model':20s} {'native':>8s} {'onednn':>8s} {'dw+onednn':>9s} {'ort':>8s} "
        f"{'onednn/dflt':>11s} {'dw+onednn/dflt':>14s}"
    )
    for name in args.models.split(","):
        r = bench(name, out_dir, args.threads, args.rounds)
        m = r["median_ms"]
        print(
            f"{name:20s} {m['native']:8.2f} {m['native_onednn']:8.2f} {m['native_dw_onednn']:9.2f} {m['ort']:8.2f} "
            f"{r['onednn_over_default']:11.2f} {m['native_dw_onednn'] / m['native']:14.2f}  load {r['loadavg'][0]:.1f}",
            flush=True,
        )
        results.append(r)
    if args.out:
        doc = {"threads": args.threads, "rounds": args.rounds, "batch": 1, "results": results}
        Path(args.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
