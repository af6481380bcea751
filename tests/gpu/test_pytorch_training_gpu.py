"""GPU training tests of xpuruntime.pytorch (issue 5): a GPT-2-small training run
under the policy {matmul: cublasLt, attention: flash_v2, layernorm: fused} follows
the plain-torch loss curve over 50 steps, a whole captured training step
(forward, backward, capturable AdamW) replays like the eager step, and the
routing decisions say which kernels ran; routed F.linear's forward and all three
gradients match float64 (its fp16/bf16 bias gradient runs on our column-sum
kernel).
"""

from __future__ import annotations

import contextlib
import os
import sys

import pytest

torch = pytest.importorskip("torch")

import xpuruntime.pytorch as xrt_torch
from xpuruntime.pytorch.ops import _bridge

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_model import GPT2, GPT2Config, make_step


def _skip_reason() -> str:
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    return _bridge.cuda_kernels_unavailable() or _bridge.capability_problem(0)


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_skip_reason()), reason=_skip_reason() or "ok")]
POLICY = {"matmul": "cublasLt", "attention": "flash_v2", "layernorm": "fused"}


def _setup(seed=0, batch=4, seq=256, n_layer=12):
    torch.manual_seed(seed)
    model = GPT2(GPT2Config(n_layer=n_layer)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, capturable=True)
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    data = torch.randint(0, 50257, (batch, seq + 1), device="cuda", generator=g)
    return model, opt, data[:, :-1].contiguous(), data[:, 1:].contiguous()


def _bf16():
    return torch.autocast("cuda", dtype=torch.bfloat16)


def _run(steps, policy):
    model, opt, idx, tgt = _setup()
    # A fixed small batch the model can memorise: the loss falls steadily.
    step = make_step(
        model, opt, idx, tgt, (lambda: xrt_torch.autocast(dtype=torch.bfloat16)) if policy else _bf16
    )
    if policy:
        xrt_torch.set_kernel_policy(**policy)
    try:
        return [step().item() for _ in range(steps)]
    finally:
        xrt_torch.clear_kernel_policy()


def test_gpt2_small_loss_curve_under_policy_follows_torch():
    xrt_torch.clear_decision_log()
    ref = _run(50, None)
    ours = _run(50, POLICY)
    assert ref[-1] < ref[0] - 1.0, f"the reference run did not learn: {ref[0]:.3f} -> {ref[-1]:.3f}"
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert abs(a - b) <= 0.05 + 0.03 * abs(b), f"step {i}: policy loss {a:.4f} vs torch {b:.4f}"
    chosen = {(d.op, d.chosen) for d in xrt_torch.decision_log()}
    assert ("attention", "flash_v2") in chosen
    assert ("layernorm", "fused") in chosen
    counts = xrt_torch.routing_counts()
    assert counts.get("attention:flash_v2", 0) >= 50 * 12


def test_captured_training_step_replays_like_eager():
    model, opt, idx, tgt = _setup(seed=3, n_layer=4)
    xrt_torch.set_kernel_policy(**POLICY)
    xrt_torch.clear_decision_log()  # only this test's routing decisions below
    try:
        step = make_step(model, opt, idx, tgt, lambda: xrt_torch.autocast(dtype=torch.bfloat16))
        graph = xrt_torch.capture_graph(step, warmup_iters=3)
        routed = [d for d in xrt_torch.decision_log() if d.op == "matmul"]
        replayed = []
        for _ in range(5):
            graph.replay()
            replayed.append(graph.output.item())
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    finally:
        xrt_torch.clear_kernel_policy()
    # Executed steps: 3 warm-ups, then the 5 replays (capture records, it does not
    # run) = steps 4..8; the same steps eagerly from the same start.
    model2, opt2, idx2, tgt2 = _setup(seed=3, n_layer=4)
    xrt_torch.set_kernel_policy(**POLICY)
    try:
        step2 = make_step(model2, opt2, idx2, tgt2, lambda: xrt_torch.autocast(dtype=torch.bfloat16))
        eager = [step2().item() for _ in range(8)][3:]
    finally:
        xrt_torch.clear_kernel_policy()
    assert replayed[-1] < replayed[0], "the replayed steps must keep training"
    # The matmuls run on cuBLASLt on the warm-up side stream and inside the capture
    # too (their workspace comes from torch's graph-aware allocator).
    assert routed and any(d.chosen == "cublasLt" for d in routed), {(d.chosen, d.rule) for d in routed}
    assert not [d for d in routed if "captur" in d.detail], [d.detail for d in routed if "captur" in d.detail]
    for a, b in zip(replayed, eager):
        assert abs(a - b) <= 2e-2 * abs(b) + 1e-2, f"replayed loss {a:.4f} vs eager {b:.4f}"
    for k, v in model2.state_dict().items():
        assert torch.allclose(state[k].float(), v.float(), rtol=5e-2, atol=5e-3), k


def test_clearing_restores_torch_exactly_on_gpu():
    x = torch.randn(8, 64, 768, device="cuda", dtype=torch.bfloat16)
    ln = torch.nn.LayerNorm(768).cuda().bfloat16()
    before = ln(x)
    xrt_torch.set_kernel_policy(layernorm="fused")
    routed = ln(x)
    xrt_torch.clear_kernel_policy()
    after = ln(x)
    assert torch.equal(before, after)
    assert (routed.float() - before.float()).abs().max().item() < 0.1
    with contextlib.suppress(AttributeError):
        assert torch._C._len_torch_function_stack() == 0


# Relative (Frobenius) error bounds against float64: the products accumulate in fp32.
LINEAR_TOL = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 2e-2}


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want).norm() / want.norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"]
)
@pytest.mark.parametrize("shape", [(7, 33, 65), (2, 300, 128, 77), (4096, 768, 3072), (1, 1, 16, 8)])
def test_linear_forward_and_gradients_match_float64(dtype, shape):
    *lead, k, n = shape
    g = torch.Generator(device="cuda").manual_seed(sum(shape))
    x = torch.randn(*lead, k, device="cuda", dtype=dtype, generator=g).requires_grad_()
    w = (torch.randn(n, k, device="cuda", dtype=dtype, generator=g) / k**0.5).requires_grad_()
    b = torch.randn(n, device="cuda", dtype=dtype, generator=g).requires_grad_()
    dy = torch.randn(*lead, n, device="cuda", dtype=dtype, generator=g)
    xrt_torch.set_kernel_policy(matmul="cublasLt")
    try:
        y = torch.nn.functional.linear(x, w, b)
        y.backward(dy)
    finally:
        xrt_torch.clear_kernel_policy()
    leaves = [t.detach().double().requires_grad_() for t in (x, w, b)]
    ref = torch.nn.functional.linear(*leaves)
    ref.backward(dy.double())
    assert _rel(y, ref) < LINEAR_TOL[dtype]
    for name, got, want in zip(("x", "w", "b"), (x, w, b), leaves):
        assert got.grad is not None and got.grad.dtype == dtype, name
        assert _rel(got.grad, want.grad) < LINEAR_TOL[dtype], f"d{name}"
    assert w.grad.is_contiguous() and b.grad.shape == (n,)


@pytest.mark.parametrize("kind", ["capturable", "fused", "foreach"])
def test_optimizer_step_runs_without_the_mode_and_matches_torch(kind):
    """CUDA AdamW (capturable, fused, foreach) steps under the policy with the mode off the
    stack (pytorch/_optim.py): not one call of the step goes through the mode, the mode is
    back after, and with the forward on torch's kernels the parameters equal a step without
    a policy bit for bit."""
    from xpuruntime.pytorch import policy as xrt_policy

    def params_after_step(policy):
        torch.manual_seed(3)
        lin = torch.nn.Linear(64, 32).cuda()
        opt = torch.optim.AdamW(lin.parameters(), lr=1e-2, **{kind: True})
        x = torch.randn(16, 64, device="cuda")
        seen: list[str] = []
        original = xrt_policy._PolicyMode.__torch_function__

        def counting(self, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", str(func)))
            return original(self, func, types, args, kwargs)

        if policy:
            xrt_torch.set_kernel_policy(**policy)
        xrt_policy._PolicyMode.__torch_function__ = counting
        try:
            for _ in range(2):
                opt.zero_grad()
                lin(x).square().sum().backward()
                depth, n = torch._C._len_torch_function_stack(), len(seen)
                opt.step()
                assert torch._C._len_torch_function_stack() == depth
                assert [c for c in seen[n:] if "record_function" not in c] == []
        finally:
            xrt_policy._PolicyMode.__torch_function__ = original
            xrt_torch.clear_kernel_policy()
        torch.cuda.synchronize()
        return [p.detach().clone() for p in lin.parameters()], seen

    plain, _ = params_after_step(None)
    # matmul routed to torch's own kernel: the forward's bits are torch's, so the step's are too
    routed, seen = params_after_step({"matmul": "torch"})
    assert "linear" in seen  # the forward went through the mode and was routed
    for a, b in zip(plain, routed):
        assert torch.equal(a, b)
    _, seen = params_after_step(POLICY)  # our kernels: the step again without the mode
    assert "linear" in seen
