"""GPT-2-small training-step benchmark (issues 5 and 17).

bf16 autocast, batch 8, sequence 1024, AdamW (capturable). Side by side in one
run, each from the same seed:

- ``eager``: the plain eager torch step;
- ``policy_eager``: the same step under the kernel policy {matmul: cublasLt,
  attention: flash_v2, layernorm: fused}, eager;
- ``policy_graph``: the policy step captured whole with
  xpuruntime.pytorch.capture_graph (forward, backward and optimizer in one CUDA graph);
- ``compiled``: the model under ``torch.compile`` (default mode), no policy;
- ``compiled_policy``: the model under ``torch.compile`` with the policy set while
  it is traced and run (our kernels as custom ops in the compiled graph).

Checks first that all start from the same loss. The kinds are timed in rounds (the
order rotating each round) so drift in clocks or host load hits all alike; each
ratio is the median over rounds of the two kinds' medians in that round. The
``goals`` list holds issue 17's goals with their figures. Writes
benchmarks/results/gpt2_step_<device>.json.
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

    amp = lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    xamp = lambda: xrt_torch.autocast(dtype=torch.bfloat16)
    model, opt, idx, tgt = setup(args.batch, args.seq)
    eager = make_step(model, opt, idx, tgt, amp)
    res["eager_first_loss"] = eager().item()

    # The policy's model: a second copy from the same seed (all copies stay alive, so
    # the steps can be timed in alternating rounds).
    p_model, p_opt, p_idx, p_tgt = setup(args.batch, args.seq)
    xrt_torch.set_kernel_policy(**POLICY)
    try:
        step = make_step(p_model, p_opt, p_idx, p_tgt, xamp)
        res["policy_first_loss"] = step().item()
        graph = xrt_torch.capture_graph(step, warmup_iters=3)
        res["decisions"] = sorted({f"{d.op}:{d.chosen}({d.rule})" for d in xrt_torch.decision_log()})
    finally:
        xrt_torch.clear_kernel_policy()  # the graph replays its kernels without it
    # A third copy for the eager policy step: the captured one's tensors belong to its graph.
    e_model, e_opt, e_idx, e_tgt = setup(args.batch, args.seq)
    policy_eager = make_step(e_model, e_opt, e_idx, e_tgt, xamp)

    # torch.compile, without and with the policy (the policy stays set while the
    # compiled model runs: dynamo guards on it, and our kernels are in its graph).
    c_model, c_opt, c_idx, c_tgt = setup(args.batch, args.seq)
    compiled = make_step(torch.compile(c_model), c_opt, c_idx, c_tgt, amp)
    res["compiled_first_loss"] = compiled().item()
    cp_model, cp_opt, cp_idx, cp_tgt = setup(args.batch, args.seq)
    compiled_policy = make_step(torch.compile(cp_model), cp_opt, cp_idx, cp_tgt, xamp)
    xrt_torch.set_kernel_policy(**POLICY)
    xrt_torch.clear_decision_log()
    try:  # the first call traces and compiles: the decisions are made (and recorded) then
        res["compiled_policy_first_loss"] = compiled_policy().item()
        res["compiled_policy_decisions"] = sorted(
            {f"{d.op}:{d.chosen}({d.rule})" for d in xrt_torch.decision_log()}
        )
    finally:
        xrt_torch.clear_kernel_policy()

    kinds = {
        "eager": eager,
        "policy_eager": policy_eager,
        "policy_graph": graph.replay,
        "compiled": compiled,
        "compiled_policy": compiled_policy,
    }
    # Timed with the policy set for the whole block (set once per block: setting an
    # equal policy again keeps the compiled graphs).
    policy_kinds = {"policy_eager", "compiled_policy"}
    for name, fn in kinds.items():
        if name in policy_kinds:
            xrt_torch.set_kernel_policy(**POLICY)
        try:
            for _ in range(3):
                fn()
        finally:
            xrt_torch.clear_kernel_policy()
    torch.cuda.synchronize()
    samples = {k: [] for k in kinds}
    rounds = []
    names = list(kinds)
    for r in range(args.rounds):
        block = {}
        for name in names[r % len(names) :] + names[: r % len(names)]:
            if name in policy_kinds:
                xrt_torch.set_kernel_policy(**POLICY)
            try:
                block[name] = statistics.median(step_times(kinds[name], args.iters))
            finally:
                xrt_torch.clear_kernel_policy()
            samples[name].append(block[name])
        rounds.append(block)

    def ratio(num, den):
        return statistics.median(b[num] / b[den] for b in rounds)

    res["rounds"] = args.rounds
    res["steps_per_round"] = args.iters
    res["round_ms"] = rounds
    for k in kinds:
        res[f"{k}_ms"] = statistics.median(samples[k])
        res[f"{k}_tokens_per_s"] = tokens / res[f"{k}_ms"] * 1e3
    res["speedup_graph_vs_eager"] = ratio("eager", "policy_graph")
    res["speedup_policy_eager_vs_eager"] = ratio("eager", "policy_eager")
    res["speedup_compiled_policy_vs_compiled"] = ratio("compiled", "compiled_policy")
    res["goals"] = [
        {
            "name": "eager policy step vs plain eager torch",
            "figure": round(res["speedup_policy_eager_vs_eager"], 4),
            "target": ">= 1.05x",
            "met": res["speedup_policy_eager_vs_eager"] >= 1.05,
        },
        {
            "name": "torch.compile + policy vs torch.compile alone",
            "figure": round(res["speedup_compiled_policy_vs_compiled"], 4),
            "target": ">= 1.0x",
            "met": res["speedup_compiled_policy_vs_compiled"] >= 1.0,
        },
        {
            "name": "captured policy step vs plain eager torch",
            "figure": round(res["speedup_graph_vs_eager"], 4),
            "target": ">= 1.25x",
            "met": res["speedup_graph_vs_eager"] >= 1.25,
        },
        {
            "name": f"stretch: captured policy tokens/s at batch {args.batch} (not the largest batch that fits)",
            "figure": round(res["policy_graph_tokens_per_s"]),
            "target": ">= 471000 tokens/s (llm.c per H100)",
            "met": res["policy_graph_tokens_per_s"] >= 471000,
        },
    ]
    print(f"GPT-2 small, bf16, batch {args.batch} x seq {args.seq} on {res['env']['device']}")
    print(
        "  first loss: "
        + "  ".join(
            f"{k} {res[k + '_first_loss']:.4f}" for k in ("eager", "policy", "compiled", "compiled_policy")
        )
    )
    for k in kinds:
        print(f"  {k:16s} {res[k + '_ms']:8.2f} ms/step  {res[k + '_tokens_per_s']:10.0f} tokens/s")
    for g in res["goals"]:
        print(f"  {g['name']}: {g['figure']} (target {g['target']}: {'met' if g['met'] else 'MISSED'})")
    print("  decisions:", ", ".join(res["decisions"]))
    print("  compiled policy decisions:", ", ".join(res["compiled_policy_decisions"]))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"gpt2_step_{res['env']['device'].replace(' ', '_')}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
