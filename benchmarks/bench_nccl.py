"""Bus bandwidth of xpuruntime.distributed vs torch.distributed (issue 21).

all_reduce, all_gather and reduce_scatter over message sizes 8 B .. 1 GiB (fp32), one
process per GPU, ours and torch's NCCL process group on the same GPUs, the same
stream discipline (each timed on its own stream with CUDA events) and the same NCCL
library (one per process: xpuruntime loads the one torch links). Bus bandwidth as
nccl-tests defines it: all_reduce 2(n-1)/n x size/time, all_gather and
reduce_scatter (n-1)/n x size/time, size = the larger buffer.

Writes benchmarks/results/nccl_<gpu>.json (per size: time and bus GB/s of both, the
ratio) with `goals`: bus bandwidth >= 0.95x torch.distributed at 256 MiB and up.

Run (all local GPUs):  python benchmarks/bench_nccl.py
Quick check:           python benchmarks/bench_nccl.py --max-bytes 16M --iters 5
Exits with a message (status 2) on a machine with fewer than 2 GPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
OPS = ("all_reduce", "all_gather", "reduce_scatter")
GOAL_MIN_BYTES = 256 << 20
GOAL_RATIO = 0.95


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"size {text!r}: use a number with an optional K/M/G suffix")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def sizes(max_bytes: int) -> list[int]:
    out, s = [], 8
    while s <= max_bytes:
        out.append(s)
        s *= 4 if s < (1 << 20) else 2  # coarse below 1 MiB, every doubling above
    return out


def bus_factor(op: str, world: int) -> float:
    return 2 * (world - 1) / world if op == "all_reduce" else (world - 1) / world


def _time(fn: Any, stream: Any, iters: int, warmup: int) -> float:
    """Mean seconds per call, CUDA events on `stream` (all ranks run the same loop)."""
    import torch

    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    for _ in range(iters):
        fn()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def _calls(op: str, comm: Any, dist: Any, big: Any, small: Any) -> tuple[Any, Any]:
    """(ours, torch's) zero-argument calls of one collective on the same buffers."""
    if op == "all_reduce":
        return (lambda: comm.all_reduce(big)), (lambda: dist.all_reduce(big))
    if op == "all_gather":
        return (lambda: comm.all_gather(big, small)), (lambda: dist.all_gather_into_tensor(big, small))
    return (lambda: comm.reduce_scatter(small, big)), (lambda: dist.reduce_scatter_tensor(small, big))


def _rank_main(rank: int, world: int, init_file: str, args: argparse.Namespace, q: Any) -> None:
    import torch
    import torch.distributed as dist
    import xpuruntime.distributed as xd

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group(
        "nccl", init_method=f"file://{init_file}", rank=rank, world_size=world, device_id=dev
    )
    comm = xd.Communicator.from_torch_process_group(timeout=600)
    stream = torch.cuda.current_stream()
    rows = []
    for op in OPS:
        for size in sizes(args.max_bytes):
            n = max(size // 4, world)
            n -= n % world  # reduce_scatter / all_gather split the big buffer in world parts
            big = torch.ones(n, device=dev)
            small = torch.ones(n // world, device=dev)
            ours, theirs = _calls(op, comm, dist, big, small)
            iters = args.iters if size >= (64 << 20) else args.iters * 4
            # torch's (synchronous) collectives run on its internal stream and make the
            # current stream wait for them: events on the current stream time both alike.
            t_ours = _time(ours, stream, iters, args.warmup)
            dist.barrier(device_ids=[rank])
            torch.cuda.synchronize()
            t_torch = _time(theirs, stream, iters, args.warmup)
            torch.cuda.synchronize()
            nbytes = n * 4
            factor = bus_factor(op, world)
            rows.append(
                {
                    "op": op,
                    "bytes": nbytes,
                    "ours_us": t_ours * 1e6,
                    "torch_us": t_torch * 1e6,
                    "ours_busbw_gbs": nbytes / t_ours * factor / 1e9,
                    "torch_busbw_gbs": nbytes / t_torch * factor / 1e9,
                }
            )
            if rank == 0:
                r = rows[-1]
                print(
                    f"{op:15s} {nbytes:>12d} B  ours {r['ours_busbw_gbs']:8.2f} GB/s  "
                    f"torch {r['torch_busbw_gbs']:8.2f} GB/s  ratio {r['ours_busbw_gbs'] / r['torch_busbw_gbs']:.3f}",
                    flush=True,
                )
    comm.destroy()
    if rank == 0:
        q.put(
            {
                "rows": rows,
                "nccl_version": ".".join(map(str, xd.nccl_version())),
                "gpu": torch.cuda.get_device_name(rank),
                "torch": torch.__version__,
                "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
            }
        )
    dist.barrier(device_ids=[rank])
    dist.destroy_process_group()


def goals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    big = [r for r in rows if r["bytes"] >= GOAL_MIN_BYTES]
    per = {
        f"{r['op']}@{r['bytes']}": {
            "ratio": round(r["ours_busbw_gbs"] / r["torch_busbw_gbs"], 3),
            "met": r["ours_busbw_gbs"] >= GOAL_RATIO * r["torch_busbw_gbs"],
        }
        for r in big
    }
    return {
        f"busbw_ge_{GOAL_RATIO}x_torch_at_ge_256MiB": {
            "cases": per,
            "met": bool(per) and all(v["met"] for v in per.values()),
            "note": "" if per else "no size >= 256 MiB was run (--max-bytes)",
        }
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-bytes", type=parse_size, default=1 << 30, help="largest message (default 1G)")
    ap.add_argument("--iters", type=int, default=20, help="timed calls per size >= 64 MiB (x4 below)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--world", type=int, default=0, help="GPUs to use (default: all)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    world = args.world or count
    if count < 2 or world < 2 or world > count:
        print(
            f"bench_nccl: needs 2+ GPUs, one process each (this machine has {count}, asked for {world or count}); "
            "nothing measured, nothing written",
            file=sys.stderr,
        )
        return 2
    mp = torch.multiprocessing.get_context("spawn")
    q = mp.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [mp.Process(target=_rank_main, args=(r, world, f"{tmp}/pg", args, q)) for r in range(world)]
        for p in procs:
            p.start()
        report = q.get()
        for p in procs:
            p.join()
    if any(p.exitcode != 0 for p in procs):
        print("bench_nccl: a rank failed: " + ", ".join(str(p.exitcode) for p in procs), file=sys.stderr)
        return 1
    result = {
        "benchmark": "nccl bus bandwidth, xpuruntime.distributed vs torch.distributed (fp32)",
        "world": world,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "loadavg": os.getloadavg(),
        **{k: report[k] for k in ("gpu", "nccl_version", "torch", "nccl_env")},
        "cases": report["rows"],
        "goals": goals(report["rows"]),
    }
    tag = re.sub(r"[^A-Za-z0-9]+", "_", report["gpu"]).strip("_")
    out = args.out or RESULTS / f"nccl_{tag}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print("goals:", json.dumps(result["goals"], indent=1))
    print(f"wrote {out}")
    if os.environ.get("OUT"):
        (Path(os.environ["OUT"]) / out.name).write_text(out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
