"""Routed torch calls on CUDA through the one Dispatcher (issue 14): best_performance
times the candidates on torch's stream and the Dispatcher keeps the fastest (pinned on
export); a routed linear on cuBLASLt and the matmul it runs land in the one log; the
CUDA plugin's KernelDefs for flash_v2 and the fused LayerNorm are the kernels routing
chooses between.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import xpuruntime as xrt
import xpuruntime.pytorch as xrt_torch
from xpuruntime.pytorch.ops import _bridge


def _skip_reason() -> str:
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    return _bridge.cuda_kernels_unavailable() or _bridge.capability_problem(0)


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_skip_reason()), reason=_skip_reason() or "ok")]


@pytest.fixture(autouse=True)
def _clean():
    xrt_torch.clear_kernel_policy()
    xrt_torch.clear_decision_log()
    yield
    xrt_torch.clear_kernel_policy()
    xrt_torch.clear_decision_log()


def test_best_performance_times_the_pool_and_the_dispatcher_keeps_the_fastest():
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 8, 512, 64, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    # The float64 reference runs before the policy is set: under it, it would be a routed call
    # (and a decision) of its own.
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    xrt_torch.set_kernel_policy(attention="auto", auto_strategy="best_performance")
    for _ in range(2):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (out.double() - ref).abs().max().item() < 2e-2
    (d,) = xrt_torch.decision_log()
    assert d.rule == "auto.best_performance" and d.hits == 2
    timed = {c.kernel: c.time_ms for c in d.candidates if c.time_ms is not None}
    assert len(timed) >= 2 and d.timings == timed
    # Times within the measurement noise are a tie that the earlier candidate wins (issue 17).
    fastest = min(timed, key=timed.get)
    assert d.chosen == fastest or f"a tie with the fastest '{fastest}'" in d.detail, d.detail
    assert "regime=eager" in d.detail
    pins = xrt.dispatch.export_pins(xrt.KernelPolicy(auto_strategy="best_performance")).pins
    assert pins[d.key]["kernel"] == d.chosen


def test_routed_linear_and_its_matmul_share_the_one_log():
    xrt_torch.set_kernel_policy(matmul="cublasLt")
    xrt.dispatch.clear_log()
    lin = torch.nn.Linear(256, 128).cuda().half()
    x = torch.randn(64, 256, device="cuda", dtype=torch.float16)
    y = lin(x)
    xrt_torch.clear_kernel_policy()  # the float64 reference below is not a routed call
    ref = x.double() @ lin.weight.double().T + lin.bias.double()
    assert (y.double() - ref).abs().max().item() < 5e-2
    (routed,) = [d for d in xrt_torch.decision_log() if d.node == "linear"]
    assert (routed.chosen, routed.rule, routed.device) == ("cublasLt", "policy.prefer", "cuda:0")
    # The training-side decision is a row of the one process log that explain() reads (the
    # native engine's decisions land there too: tests/python/test_dispatch_one_log.py).
    everything = xrt.dispatch.explain()
    assert routed.seq in {d.seq for d in everything}
    assert all(d.op == "matmul" for d in everything if d.seq == routed.seq)


def test_routing_chooses_between_the_plugins_kernel_defs():
    infos = {(k.op, k.name): k for k in xrt.kernels.list_kernels(device="cuda")}
    for op, name in (("attention", "flash_v2"), ("layernorm", "fused")):
        k = infos[(op, name)]
        assert k.provider != "python", f"{op}/{name}: the CUDA plugin's KernelDef should be registered"
    assert infos[("attention", "cudnn")].requested_only
    xrt_torch.set_kernel_policy(attention="flash_v2", layernorm="fused")
    x = torch.randn(4, 128, 768, device="cuda", dtype=torch.bfloat16)
    F.layer_norm(x, (768,))
    q = torch.randn(1, 12, 128, 64, device="cuda", dtype=torch.bfloat16)
    F.scaled_dot_product_attention(q, q, q, is_causal=True)
    chosen = {(d.op, d.chosen, d.rule) for d in xrt_torch.decision_log()}
    assert ("layernorm", "fused", "policy.prefer") in chosen
    assert ("attention", "flash_v2", "policy.prefer") in chosen
