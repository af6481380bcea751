"""torch.compile of a model under a kernel policy (issue 31), on CPU torch.

The policy is resolved while dynamo traces: the chosen kernel is baked into the graph
(our kernels as one ``xpuruntime::`` custom op per routed call, their CPU reference
implementations here), the Decision is recorded at trace time, and a policy change
invalidates the compiled graph through a guard. A dimension dynamo made dynamic is
specialized at a routed call (one static case per size, decided at trace time); it
used to fail with ``InternalTorchDynamoError: SymNodeVariable() is not a constant`` (or
a graph break that dynamo then mishandled).
"""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import xpuruntime.pytorch as xrt_torch
from xpuruntime import _core

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
from gpt2_model import GPT2, GPT2Config

OURS = {"matmul": "cublasLt", "attention": "flash_v2", "layernorm": "fused"}


@pytest.fixture(autouse=True)
def _clean(clean_kernel_policy):
    torch._dynamo.reset()  # compiled graphs of one test must not serve the next
    yield
    torch._dynamo.reset()


def _tiny_gpt2() -> GPT2:
    torch.manual_seed(0)
    return GPT2(GPT2Config(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32))


def _batch(seq: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(0, 64, (2, seq + 1), generator=g)
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


class _GraphOps:
    """A dynamo backend that counts the graphs and the xpuruntime custom ops in them."""

    def __init__(self) -> None:
        self.graphs = 0
        self.ops: list[str] = []

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        for node in gm.graph.nodes:
            if node.op == "call_function" and "xpuruntime" in str(node.target):
                self.ops.append(str(node.target))
        return gm.forward


def _eager_policy_loss(model, idx, tgt):
    xrt_torch.set_kernel_policy(**OURS)
    try:
        return model(idx, tgt)
    finally:
        xrt_torch.clear_kernel_policy()


def test_a_gpt2_step_compiles_in_one_graph_with_one_op_per_routed_call():
    model = _tiny_gpt2()
    idx, tgt = _batch(8)
    ref = _eager_policy_loss(model, idx, tgt)
    counter = _GraphOps()
    xrt_torch.set_kernel_policy(**OURS)
    loss = torch.compile(model, backend=counter, fullgraph=True)(idx, tgt)  # fullgraph: a break raises
    loss.backward()
    assert counter.graphs == 1
    # 2 blocks x 2 layer norms + ln_f; 2 attentions: each one custom op in the graph
    assert sorted(counter.ops).count("xpuruntime.layer_norm_fwd.default") == 5, counter.ops
    assert sorted(counter.ops).count("xpuruntime.flash_attn_fwd.default") == 2, counter.ops
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-5)
    assert all(p.grad is not None for p in model.parameters())
    decided = {(d.op, d.chosen) for d in xrt_torch.decision_log()}
    assert {("layernorm", "fused"), ("attention", "flash_v2")} <= decided
    # cuBLASLt runs CUDA tensors only: prefer falls back to torch's matmul, recorded why
    linears = [d for d in xrt_torch.decision_log() if d.op == "matmul" and d.node == "linear"]
    assert linears and all(d.chosen == "torch" for d in linears)


def test_the_decisions_are_made_at_trace_time_not_per_call():
    model = _tiny_gpt2()
    idx, tgt = _batch(8)
    xrt_torch.set_kernel_policy(**OURS)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    compiled(idx, tgt)
    n = len(xrt_torch.decision_log())
    assert n > 0
    for seed in (1, 2, 3):  # same case, new data: no new decision, no retrace
        compiled(*_batch(8, seed))
    assert len(xrt_torch.decision_log()) == n


def test_a_policy_change_retraces_and_the_new_kernels_are_in_the_graph():
    model = _tiny_gpt2()
    idx, tgt = _batch(8)
    counter = _GraphOps()
    compiled = torch.compile(model, backend=counter)
    xrt_torch.set_kernel_policy(**OURS)
    compiled(idx, tgt)
    assert counter.graphs == 1 and "xpuruntime.flash_attn_fwd.default" in counter.ops
    xrt_torch.set_kernel_policy(**OURS)  # an equal policy: the graph stays
    compiled(idx, tgt)
    assert counter.graphs == 1
    counter.ops.clear()
    xrt_torch.set_kernel_policy(matmul="torch", attention="math", layernorm="torch")
    out = compiled(idx, tgt)  # the guard on the policy fails: traced again, torch's kernels
    assert counter.graphs == 2
    assert counter.ops == []
    xrt_torch.clear_kernel_policy()
    torch.testing.assert_close(out, model(idx, tgt), rtol=1e-5, atol=1e-5)


def test_a_compiled_graph_runs_torchs_kernels_after_the_policy_is_cleared():
    model = _tiny_gpt2()
    idx, tgt = _batch(8)
    counter = _GraphOps()
    compiled = torch.compile(model, backend=counter)
    xrt_torch.set_kernel_policy(**OURS)
    compiled(idx, tgt)
    xrt_torch.clear_kernel_policy()
    counter.ops.clear()
    compiled(idx, tgt)
    assert counter.graphs == 2 and counter.ops == []


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_dynamic_shapes_under_a_policy_compile_in_one_graph(backend):
    """The failure of issue 31: a symbolic size reached the trace-time decision and dynamo
    failed. Now the routed calls specialize the sizes they see: one graph per length,
    no graph break (fullgraph), the eager policy's results."""
    model = _tiny_gpt2()
    batches = [_batch(8), _batch(12, seed=1)]
    refs = [_eager_policy_loss(model, *b) for b in batches]
    xrt_torch.set_kernel_policy(**OURS)
    compiled = torch.compile(model, backend=backend, dynamic=True, fullgraph=True)
    losses = [compiled(*b) for b in batches]
    for loss, ref in zip(losses, refs):
        torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-5)
    decided = {(d.op, d.chosen) for d in xrt_torch.decision_log()}
    assert {("layernorm", "fused"), ("attention", "flash_v2")} <= decided


def test_a_recompile_that_makes_a_dimension_dynamic_keeps_running():
    """Automatic dynamic shapes: the second sequence length recompiles with a symbolic
    length (what a training loop with varying lengths does)."""
    model = _tiny_gpt2()
    xrt_torch.set_kernel_policy(**OURS)
    compiled = torch.compile(model, backend="aot_eager")
    for seq, seed in ((8, 0), (12, 1), (10, 2)):
        idx, tgt = _batch(seq, seed)
        loss = compiled(idx, tgt)
        xrt_torch.clear_kernel_policy()
        ref = _eager_policy_loss(model, idx, tgt)
        xrt_torch.set_kernel_policy(**OURS)
        torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-5)


def test_column_sums_op_opcheck():
    from xpuruntime.pytorch.ops.matmul import xrt_column_sums

    g = torch.Generator().manual_seed(0)
    x = torch.randn(9, 5, generator=g)
    torch.library.opcheck(xrt_column_sums, (x,))
    torch.testing.assert_close(xrt_column_sums(x).double(), x.double().sum(0), rtol=1e-6, atol=1e-6)


def test_best_performance_under_compile_records_why_it_was_not_timed():
    model = _tiny_gpt2()
    idx, tgt = _batch(8)
    xrt_torch.set_kernel_policy(attention="auto", layernorm="auto", auto_strategy="best_performance")
    torch.compile(model, backend="aot_eager", fullgraph=True)(idx, tgt)
    decisions = [d for d in xrt_torch.decision_log() if d.op in ("attention", "layernorm")]
    assert decisions
    assert all(d.rule != _core.rule.AUTO_BEST_PERFORMANCE or d.timings for d in decisions)


def test_linear_ops_opcheck():
    """xpuruntime::linear and xpuruntime::linear_backward (a routed F.linear under
    torch.compile): schema, fake implementations and autograd registration, with and
    without a bias, and a backward that asks for only some gradients."""
    from xpuruntime.pytorch.ops.linear import xrt_linear, xrt_linear_backward

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 8, generator=g, requires_grad=True)
    w = torch.randn(6, 8, generator=g, requires_grad=True)
    b = torch.randn(6, generator=g, requires_grad=True)
    for bias in (b, None):
        torch.library.opcheck(xrt_linear, (x, w, bias, "cublasLt"))
    gy = torch.randn(2, 5, 6, generator=g)
    for need in ((True, True, True), (False, True, False), (True, False, True)):
        torch.library.opcheck(xrt_linear_backward, (gy, x.detach(), w.detach(), "cublasLt", *need))
    dx, dw, db = xrt_linear_backward(gy, x.detach(), w.detach(), "cublasLt", True, True, True)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    F.linear(x64, w64, b64).backward(gy.double())
    for got, want in ((dx, x64.grad), (dw, w64.grad), (db, b64.grad)):
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_a_routed_linear_compiles_to_the_linear_ops_with_no_transposes(monkeypatch):
    """Under torch.compile a routed F.linear on our GEMM kernel is xpuruntime::linear in
    the forward graph and one xpuruntime::linear_backward in the backward graph, on the
    weight and gradient as they are: no aten transpose / t for inductor to copy (the
    needs_contiguous_strides tag made it copy weight.t() and the gradient's transpose
    for every layer). On the CPU cublasLt is refused, so the trace-time decision is
    swapped for it; the ops' CPU references then run, against eager F.linear."""
    from torch._functorch.aot_autograd import aot_module_simplified
    from xpuruntime.pytorch import policy

    decide = policy._compile_time_kernel

    def cublaslt_for_linear(fi, arg_specs, kw_specs, hint, generation):
        kernel = decide(fi, arg_specs, kw_specs, hint, generation)
        return "cublasLt" if fi == policy._FUNC_INDEX[F.linear] else kernel

    monkeypatch.setattr(policy, "_compile_time_kernel", cublaslt_for_linear)
    graphs: dict[str, list[str]] = {"fw": [], "bw": []}

    def backend(gm, example_inputs):
        def keep(name):
            def compiler(g, _inputs):
                graphs[name] += [str(n.target) for n in g.graph.nodes if n.op == "call_function"]
                return g

            return compiler

        return aot_module_simplified(gm, example_inputs, fw_compiler=keep("fw"), bw_compiler=keep("bw"))

    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 24)
    x = torch.randn(3, 5, 16, requires_grad=True)
    xrt_torch.set_kernel_policy(matmul="cublasLt")
    y = torch.compile(lambda t: F.gelu(lin(t)), backend=backend)(x)
    y.sum().backward()
    assert graphs["fw"].count("xpuruntime.linear.default") == 1, graphs["fw"]
    assert graphs["bw"].count("xpuruntime.linear_backward.default") == 1, graphs["bw"]
    for name, ops in graphs.items():
        assert not [o for o in ops if o in ("aten.t.default", "aten.transpose.int")], (name, ops)
        assert "xpuruntime.matmul.default" not in ops, (name, ops)
    xrt_torch.clear_kernel_policy()
    x2 = x.detach().clone().requires_grad_()
    lin2 = torch.nn.Linear(16, 24)
    lin2.load_state_dict(lin.state_dict())
    y2 = F.gelu(lin2(x2))
    y2.sum().backward()
    torch.testing.assert_close(y, y2, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lin.weight.grad, lin2.weight.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lin.bias.grad, lin2.bias.grad, rtol=1e-5, atol=1e-5)
