"""GPT-2-small training-step benchmark (issue 5).

bf16 autocast, batch 8, sequence 1024, AdamW (capturable). Side by side in one
run: the plain eager torch step, and the same step under the kernel policy
{matmul: cublasLt, attention: flash_v2, layernorm: fused} captured whole with
xpuruntime.pytorch.capture_graph (forward, backward and optimizer in one CUDA
graph). Reports tokens/s and the ratio; checks first that both start from the
same loss. The two are timed in alternating rounds (the order flipping each
round) so drift in clocks or host load hits both alike; the ratio reported is the
median over rounds of eager/graph. Writes benchmarks/results/gpt2_step_<device>.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys

import torch
import xpuruntime
import xpuruntime.pytorch as xrt_torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu"))
from gpt2_model import GPT2, make_step

POLICY = {"matmul": "cublasLt", "attention": "flash_v2", "layernorm": "fused"}


def setup(batch, seq):
    torch.manual_seed(0)
    model = GPT2().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=True)
    data = torch.randint(0, 50257, (batch, seq + 1), device="cuda")
    return model, opt, data[:, :-1].contiguous(), data[:, 1:].contiguous()


def step_times(fn, iters):
    """Milliseconds of each of ``iters`` steps (CUDA events around each)."""
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return times


def time_steps(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    return statistics.median(step_times(fn, iters))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=10, help="steps per round and kind")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args()
    tokens = args.batch * args.seq
    res = {
        "benchmark": "gpt2_step",
        "batch": args.batch,
        "seq": args.seq,
        "dtype": "bfloat16",
        "env": {
            "device": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "xpuruntime": xpuruntime.__version__,
            "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        },
    }

    model, opt, idx, tgt = setup(args.batch, args.seq)
    eager = make_step(model, opt, idx, tgt, lambda: torch.autocast("cuda", dtype=torch.bfloat16))
    res["eager_first_loss"] = eager().item()

    # The policy's model: a second copy from the same seed (both stay alive, so the
    # two steps can be timed in alternating rounds).
    p_model, p_opt, p_idx, p_tgt = setup(args.batch, args.seq)
    xrt_torch.set_kernel_policy(**POLICY)
    try:
        step = make_step(p_model, p_opt, p_idx, p_tgt, lambda: xrt_torch.autocast(dtype=torch.bfloat16))
        res["policy_first_loss"] = step().item()
        res["policy_eager_ms"] = time_steps(step, args.iters)
        graph = xrt_torch.capture_graph(step, warmup_iters=3)
        res["decisions"] = sorted({f"{d.op}:{d.chosen}({d.rule})" for d in xrt_torch.decision_log()})
    finally:
        xrt_torch.clear_kernel_policy()  # the graph replays its kernels without it

    for fn in (eager, graph.replay):
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    eager_t, graph_t, ratios = [], [], []
    for r in range(args.rounds):
        order = ((eager, eager_t), (graph.replay, graph_t))
        block = {}
        for fn, sink in order if r % 2 == 0 else order[::-1]:
            block[fn] = step_times(fn, args.iters)
            sink.extend(block[fn])
        ratios.append(statistics.median(block[eager]) / statistics.median(block[graph.replay]))
    res["rounds"] = args.rounds
    res["steps_per_round"] = args.iters
    res["eager_ms"] = statistics.median(eager_t)
    res["policy_graph_ms"] = statistics.median(graph_t)
    res["round_ratios"] = ratios
    for k in ("eager", "policy_eager", "policy_graph"):
        res[f"{k}_tokens_per_s"] = tokens / res[f"{k}_ms"] * 1e3
    res["speedup_graph_vs_eager"] = statistics.median(ratios)
    res["speedup_policy_eager_vs_eager"] = res["eager_ms"] / res["policy_eager_ms"]
    print(f"GPT-2 small, bf16, batch {args.batch} x seq {args.seq} on {res['env']['device']}")
    print(f"  first loss: eager {res['eager_first_loss']:.4f}  policy {res['policy_first_loss']:.4f}")
    for k in ("eager", "policy_eager", "policy_graph"):
        print(f"  {k:14s} {res[k + '_ms']:8.2f} ms/step  {res[k + '_tokens_per_s']:10.0f} tokens/s")
    print(
        f"  policy+graph vs eager torch: {res['speedup_graph_vs_eager']:.3f}x "
        f"(median of {args.rounds} rounds; range {min(ratios):.3f}-{max(ratios):.3f})"
    )
    print("  decisions:", ", ".join(res["decisions"]))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"gpt2_step_{res['env']['device'].replace(' ', '_')}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
