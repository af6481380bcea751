"""GPU tests of the routed call's one path (issue 31).

A routed matmul/linear and its bias gradient run the registry's kernels through
``_core.routed.PreparedCall`` on torch's pointers and current stream: the same
kernel gives the same bits as ``_core.ops.matmul_with_kernel``; no routed call
(matmul, linear, SDPA, layer_norm; forward and backward) synchronizes or allocates
through xpuruntime's own allocator after its case's first call; a routed linear
replays inside a CUDA graph; torch.compile of a model with the policy set runs with
our ops in its graph and gives the eager policy's loss within bf16 tolerance.
"""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import xpuruntime.pytorch as xrt_torch
from xpuruntime import _core
from xpuruntime.pytorch.ops import _bridge, _launch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_model import GPT2, GPT2Config


def _skip_reason() -> str:
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    return _bridge.cuda_kernels_unavailable() or _bridge.capability_problem(0)


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_skip_reason()), reason=_skip_reason() or "ok")]
POLICY = {"matmul": "cublasLt", "attention": "flash_v2", "layernorm": "fused"}


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    # every prepared call checks its tensors against its case first (_launch.check): a
    # case reused for other tensors is a typed error, not an illegal memory access
    monkeypatch.setattr(_launch, "CHECK", True)
    xrt_torch.clear_kernel_policy()
    xrt_torch.clear_decision_log()
    yield
    xrt_torch.clear_kernel_policy()
    xrt_torch.clear_decision_log()


def _rand(*shape, dtype=torch.bfloat16, seed=0, grad=False):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", generator=g).to(dtype).requires_grad_(grad)


# cuBLAS (cublasGemmEx) has no bias epilogue: its KernelDef refuses a bias, so only
# cublasLt runs the linear with one (the bias-less case covers cublas).
@pytest.mark.parametrize("kernel,with_bias", [("cublasLt", True), ("cublasLt", False), ("cublas", False)])
@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float32], ids=["fp16", "bf16", "fp32"]
)
def test_routed_linear_gives_the_bits_of_the_same_registry_kernel(kernel, with_bias, dtype):
    x, w = _rand(3, 77, 96, dtype=dtype), _rand(160, 96, dtype=dtype, seed=1)
    b = _rand(160, dtype=dtype, seed=2) if with_bias else None
    xrt_torch.set_kernel_policy(matmul=kernel)
    got = F.linear(x, w, b)
    (d,) = [d for d in xrt_torch.decision_log() if d.op == "matmul"]
    assert d.chosen == kernel, d.summary()
    xrt_torch.clear_kernel_policy()
    ref = _core.ops.matmul_with_kernel(kernel, x.reshape(-1, 96), w.t(), bias=b)
    assert torch.equal(got.reshape(-1, 160), torch.from_dlpack(ref))
    want = x.double() @ w.double().t() + (b.double() if with_bias else 0.0)
    tol = {torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 1e-1}[dtype]
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


def test_cublas_refuses_a_bias_so_a_linear_with_one_falls_back_and_says_why():
    """What the first H200 run of this path saw ('torch' chosen under matmul=cublas): the
    C++ cublas KernelDef has no epilogue and refuses the bias (the deleted Python copy
    of its checks accepted it); under 'prefer' the Decision falls back to torch's kernel
    with that reason, and the result is torch's own."""
    x, w, b = _rand(3, 77, 96), _rand(160, 96, seed=1), _rand(160, seed=2)
    xrt_torch.set_kernel_policy(matmul="cublas")
    got = F.linear(x, w, b)
    (d,) = [d for d in xrt_torch.decision_log() if d.op == "matmul"]
    assert d.chosen == "torch" and d.rule == "fallback", d.summary()
    c = d.candidate("cublas")
    assert c is not None and c.verdict == "rejected" and c.reason_code == "attribute_unsupported"
    assert "epilogue" in c.detail
    xrt_torch.clear_kernel_policy()
    assert torch.equal(got, F.linear(x, w, b))


def test_the_projections_of_a_block_each_get_their_own_prepared_case():
    """The H200 fault of the first run: c_attn (n = 3d), c_proj (n = d) and fc (n = 4d)
    share x's shape and the transposed weights' strides; a case key without n reused
    c_attn's prepared call for c_proj, whose output it overran (illegal memory access)."""
    d = 256
    x = _rand(4, 64, d)
    layers = [(_rand(n, d, seed=n), _rand(n, seed=n + 1)) for n in (3 * d, d, 4 * d)]
    xrt_torch.set_kernel_policy(matmul="cublasLt")
    for _ in range(2):
        for w, b in layers:
            got = F.linear(x, w, b)
            want = x.double() @ w.double().t() + b.double()
            torch.testing.assert_close(got.double(), want, rtol=5e-2, atol=1e-1)
    torch.cuda.synchronize()


def test_routed_linear_gradients_match_float64():
    x, w, b = (_rand(4, 33, 64, grad=True), _rand(48, 64, seed=1, grad=True), _rand(48, seed=2, grad=True))
    xrt_torch.set_kernel_policy(matmul="cublasLt")
    out = F.linear(x, w, b)
    g = _rand(4, 33, 48, seed=3)
    out.backward(g)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    (F.linear(x64, w64, b64)).backward(g.double())
    for got, want in ((x.grad, x64.grad), (w.grad, w64.grad), (b.grad, b64.grad)):
        torch.testing.assert_close(got.double(), want, rtol=5e-2, atol=5e-2 * want.abs().max().item())


@pytest.mark.parametrize("with_bias", [True, False])
def test_a_routed_linears_later_backwards_run_from_its_slots_and_match_float64(with_bias):
    """The first backward of a routed linear's case marks it (CaseSlots.linear_bwd); its
    later backwards run dx, dW and the bias gradient from the case's prepared calls on
    the pointers alone. Three fwd+bwd of one case on fresh inputs, each against float64."""
    from xpuruntime.pytorch import _log

    xrt_torch.set_kernel_policy(matmul="cublasLt")
    for seed in (0, 10, 20):
        x = _rand(4, 33, 64, seed=seed, grad=True)
        w = _rand(48, 64, seed=seed + 1, grad=True)
        b = _rand(48, seed=seed + 2, grad=True) if with_bias else None
        F.linear(x, w, b).backward(g := _rand(4, 33, 48, seed=seed + 3))
        ts = (x, w) + ((b,) if with_bias else ())
        t64 = [t.detach().double().requires_grad_() for t in ts]
        F.linear(*t64).backward(g.double())
        for got, want in zip((t.grad for t in ts), (t.grad for t in t64)):
            torch.testing.assert_close(got.double(), want, rtol=5e-2, atol=5e-2 * want.abs().max().item())
    marked = [s.linear_bwd for e in _log.cases.values() if (s := _slots_of(e.launch)) is not None]
    assert marked and all(m == 0 for m in marked), marked


def _slots_of(launch):
    """The CaseSlots a routed linear's launcher keeps (in its closure), or None."""
    from xpuruntime.pytorch.ops.matmul import CaseSlots

    for cell in getattr(launch, "__closure__", None) or ():
        if isinstance(cell.cell_contents, CaseSlots):
            return cell.cell_contents
    return None


def _calls():
    x, w, b = _rand(64, 256, grad=True), _rand(256, 256, seed=1, grad=True), _rand(256, seed=2, grad=True)
    q, k, v = (_rand(2, 4, 128, 64, seed=s, grad=True) for s in (3, 4, 5))
    lw, lb = _rand(256, seed=6, grad=True), _rand(256, seed=7, grad=True)
    gl, ga = _rand(64, 256, seed=8), _rand(2, 4, 128, 64, seed=9)
    return {
        "matmul": lambda: torch.matmul(x.detach(), w.detach()),
        "linear fwd+bwd": lambda: F.linear(x, w, b).backward(gl),
        "attention fwd+bwd": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(ga),
        "layernorm fwd+bwd": lambda: F.layer_norm(x, (256,), lw, lb).backward(gl),
    }


@pytest.mark.parametrize("name", ["matmul", "linear fwd+bwd", "attention fwd+bwd", "layernorm fwd+bwd"])
def test_a_routed_call_neither_synchronizes_nor_allocates_outside_torch(name):
    fn = _calls()[name]
    xrt_torch.set_kernel_policy(**POLICY)
    fn()  # the case's first call: decided, prepared
    fn()
    torch.cuda.synchronize()
    before = _core.memory.stats("cuda:0").num_allocs
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time queued ahead of the calls
    end.record()
    for _ in range(10):
        fn()
    still_sleeping = not end.query()
    torch.cuda.synchronize()
    assert still_sleeping, f"{name}: the host waited for the GPU (a synchronization per call)"
    assert _core.memory.stats("cuda:0").num_allocs == before, f"{name}: allocated outside torch's allocator"
    chosen = {d.chosen for d in xrt_torch.decision_log()}
    assert chosen & set(POLICY.values())


def test_a_routed_linear_replays_in_a_cuda_graph():
    x, w, b = _rand(32, 128), _rand(64, 128, seed=1), _rand(64, seed=2)
    xrt_torch.set_kernel_policy(matmul="cublasLt")
    static_x = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        F.linear(static_x, w, b)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = F.linear(static_x, w, b)
    for seed in (5, 6):
        static_x.copy_(_rand(32, 128, seed=seed))
        graph.replay()
        torch.cuda.synchronize()
        want = F.linear(static_x, w, b)  # the eager routed call, same kernel
        assert torch.equal(out, want)
    assert len(_launch._workspaces) <= _launch.MAX_WORKSPACES


def test_torch_compile_with_the_policy_runs_and_matches_the_eager_policy():
    torch.manual_seed(0)
    model = GPT2(GPT2Config(n_layer=2)).cuda()
    g = torch.Generator(device="cuda").manual_seed(1)
    data = torch.randint(0, 50257, (2, 129), device="cuda", generator=g)
    idx, tgt = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    xrt_torch.set_kernel_policy(**POLICY)
    with xrt_torch.autocast(dtype=torch.bfloat16):
        eager = model(idx, tgt)
    xrt_torch.clear_decision_log()
    with xrt_torch.autocast(dtype=torch.bfloat16):
        compiled = torch.compile(model, fullgraph=True)(idx, tgt)  # inductor; fullgraph: no break
    compiled.backward()
    torch.testing.assert_close(compiled.float(), eager.float(), rtol=2e-2, atol=2e-2)
    decided = {(d.op, d.chosen) for d in xrt_torch.decision_log()}
    assert {("matmul", "cublasLt"), ("attention", "flash_v2"), ("layernorm", "fused")} <= decided
