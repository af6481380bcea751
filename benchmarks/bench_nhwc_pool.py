"""Channels-last pools (issue 18) against the NCHW pools they replace: a speed sanity check.

Times the native CPU engine's ``xrt.NhwcMaxPool`` (kernel ``cpu_nhwc``) on [1,112,112,64]
3x3/s2/pad 1 next to ONNX ``MaxPool`` (kernel ``cpu``) on [1,64,112,112], and the same for
AveragePool 2x2/s2 on 56x56x128 and GlobalAveragePool on 112x112x32 and 7x7x1280. Both
layouts run in one process, interleaved round by round. Each model holds ``--copies``
independent pool nodes reading the same input. Two figures per case, medians over rounds:
the kernel's own time (the profiler's step ranges) and the wall time of a session run
divided by the pools it holds (session overhead and output allocation included).

Run: ``PYTHONPATH=python XRT_BUILD_DIR=build/<dir> python3 benchmarks/bench_nhwc_pool.py``
(``--threads 2`` sets ExecutionPolicy(threads=2); ``--json PATH`` writes the results).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import numpy as np
import xpuruntime as xrt
from onnx import TensorProto, helper

# (name, ONNX op, attributes, channels-last input shape)
CASES: list[tuple[str, str, dict[str, Any], list[int]]] = [
    (
        "maxpool_3x3s2",
        "MaxPool",
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        [1, 112, 112, 64],
    ),
    ("avgpool_2x2s2", "AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}, [1, 56, 56, 128]),
    ("gap_112x112x32", "GlobalAveragePool", {}, [1, 112, 112, 32]),
    ("gap_7x7x1280", "GlobalAveragePool", {}, [1, 7, 7, 1280]),
]


def model(op: str, attrs: dict[str, Any], shape: list[int], nhwc: bool, copies: int) -> bytes:
    """``copies`` pools of ``op`` on one input, NHWC (domain xrt) or NCHW (ONNX)."""
    in_shape = shape if nhwc else [shape[0], shape[-1], *shape[1:-1]]
    rank = len(in_shape)
    nodes = [
        helper.make_node(
            ("Nhwc" if nhwc else "") + op, ["x"], [f"y{i}"], domain="xrt" if nhwc else "", **attrs
        )
        for i in range(copies)
    ]
    outs = [
        helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [f"d{j}" for j in range(rank)])
        for i in range(copies)
    ]
    g = helper.make_graph(
        nodes, "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)], outs
    )
    opsets = [helper.make_opsetid("", 20)] + ([helper.make_opsetid("xrt", 1)] if nhwc else [])
    return helper.make_model(g, opset_imports=opsets).SerializeToString()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--threads", type=int, default=0, help="ExecutionPolicy(threads=...); 0: the engine's default"
    )
    ap.add_argument("--copies", type=int, default=16, help="pool nodes per model")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--runs", type=int, default=10, help="session runs per round and layout")
    ap.add_argument("--json", default="", help="write the results here")
    args = ap.parse_args()
    policy = xrt.ExecutionPolicy(threads=args.threads) if args.threads > 0 else None
    rng = np.random.default_rng(0)
    results = []
    for name, op, attrs, shape in CASES:
        x = rng.standard_normal(shape).astype(np.float32)
        feeds = {
            "nhwc": {"x": x},
            "nchw": {"x": np.ascontiguousarray(x.transpose(0, len(shape) - 1, *range(1, len(shape) - 1)))},
        }
        sess = {
            k: xrt.InferenceSession(
                model(op, attrs, shape, k == "nhwc", args.copies),
                engine="native",
                device="cpu",
                exec_policy=policy,
            )
            for k in ("nhwc", "nchw")
        }
        kernels = {
            k: sorted({d.chosen for d in s.explain() if d.op.endswith(op.lower())}) for k, s in sess.items()
        }
        # Same results (up to float32 summation order) before timing.
        a = sess["nhwc"].run(feeds["nhwc"])["y0"]
        b = sess["nchw"].run(feeds["nchw"])["y0"]
        np.testing.assert_allclose(a, b.transpose(0, *range(2, b.ndim), 1), rtol=1e-5, atol=1e-5)
        # Per round and layout: `runs` session runs, wall time per pool; then one run under the
        # profiler, whose step ranges give each pool kernel's own time.
        wall: dict[str, list[float]] = {"nhwc": [], "nchw": []}
        kern: dict[str, list[float]] = {"nhwc": [], "nchw": []}
        for _ in range(args.rounds):
            for k in ("nhwc", "nchw"):
                s, f = sess[k], feeds[k]
                t0 = time.perf_counter()
                for _ in range(args.runs):
                    s.run(f)
                wall[k].append((time.perf_counter() - t0) / (args.runs * args.copies) * 1e6)
                with xrt.profile() as prof:
                    s.run(f)
                kern[k] += [
                    e["dur_ns"] / 1e3 for e in prof.events() if e["category"] == "range" and op in e["name"]
                ]
        row = {"case": name, "nhwc_shape": shape, "kernels": kernels}
        for label, data in (("wall", wall), ("kernel", kern)):
            for k in ("nhwc", "nchw"):
                row[f"{label}_{k}_us"] = round(statistics.median(data[k]), 2)
            row[f"{label}_nchw_over_nhwc"] = round(row[f"{label}_nchw_us"] / row[f"{label}_nhwc_us"], 2)
        row["kernel_min_nhwc_us"] = round(min(kern["nhwc"]), 2)
        row["kernel_min_nchw_us"] = round(min(kern["nchw"]), 2)
        results.append(row)
        print(
            f"{name:16s} kernel: nhwc {row['kernel_nhwc_us']:8.1f} us  nchw {row['kernel_nchw_us']:8.1f} us"
            f"  nchw/nhwc {row['kernel_nchw_over_nhwc']:5.2f}   per pool in a session run: nhwc"
            f" {row['wall_nhwc_us']:8.1f} us  nchw {row['wall_nchw_us']:8.1f} us"
        )
    out = {
        "threads": args.threads or "default",
        "copies": args.copies,
        "loadavg": os.getloadavg(),
        "vector_isa": xrt.ops.cpu_gemm_info()["vector_isa"],
        "results": results,
    }
    print(json.dumps({k: v for k, v in out.items() if k != "results"}))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
