"""xpuruntime.pytorch kernel policy on CPU torch (issue 5): routing follows the policy
and is recorded in the decision log, 'prefer' falls back and 'require' raises,
'auto' chooses, clearing restores torch exactly, autocast carries the precision
hint, profile writes both traces, and the lazy import says how to install torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import xpuruntime
import xpuruntime.pytorch as xrt_torch
from xpuruntime import _core

MSG = "xpuruntime.pytorch requires PyTorch. Install with: pip install xpuruntime[torch]"


pytestmark = pytest.mark.usefixtures("clean_kernel_policy")


def _qkv(seed=0, shape=(2, 4, 6, 8), grad=False):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_(grad) for _ in range(3))


def _mode_stack_len() -> int:
    return torch._C._len_torch_function_stack()


# ---- routing follows the policy and is recorded -------------------------------------------
def test_attention_routes_to_flash_v2_and_is_recorded_once_per_case():
    xrt_torch.set_kernel_policy(attention="flash_v2")
    q, k, v = _qkv()
    ref = torch.softmax(q @ k.transpose(-1, -2) / 8**0.5, -1) @ v
    for _ in range(3):
        out = F.scaled_dot_product_attention(q, k, v)
    assert torch.allclose(out, ref, rtol=1e-12, atol=1e-12)
    log = xrt_torch.decision_log()
    assert len(log) == 1
    d = log[0]
    assert (d.op, d.chosen, d.rule, d.node) == (
        "attention",
        "flash_v2",
        "policy.prefer",
        "scaled_dot_product_attention",
    )
    assert d.device == "cpu" and d.shapes[0] == [2, 4, 6, 8] and d.dtypes[0] == "float64"
    assert xrt_torch.routing_counts() == {"attention:flash_v2": 3}
    F.scaled_dot_product_attention(q[:, :, :5], k, v)  # a new case: a new decision
    assert len(xrt_torch.decision_log()) == 2
    assert "flash_v2" in xrt_torch.explain()


def test_layernorm_routes_nn_layernorm_to_fused_with_autograd():
    xrt_torch.set_kernel_policy(layernorm="fused")
    ln = torch.nn.LayerNorm(16).double()
    x = torch.randn(3, 5, 16, dtype=torch.float64, requires_grad=True)
    y = ln(x)
    y.square().sum().backward()
    d = xrt_torch.decision_log()[0]
    assert (d.op, d.chosen, d.rule) == ("layernorm", "fused", "policy.prefer")
    gx = x.grad.clone()
    xrt_torch.clear_kernel_policy()
    x.grad = None
    ref = ln(x)
    ref.square().sum().backward()
    assert torch.allclose(y, ref, atol=1e-12)
    assert torch.allclose(gx, x.grad, atol=1e-10)


def test_autograd_through_routed_attention_matches_torch():
    q, k, v = _qkv(3, grad=True)
    xrt_torch.set_kernel_policy(attention="flash_v2")
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    xrt_torch.clear_kernel_policy()
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ref_grads = torch.autograd.grad(ref.sum(), (q, k, v))
    for a, b in zip(grads, ref_grads):
        assert torch.allclose(a, b, atol=1e-10)


def test_matmul_cublaslt_on_cpu_falls_back_to_torch_with_the_reason():
    xrt_torch.set_kernel_policy(matmul="cublasLt")
    lin = torch.nn.Linear(8, 4).double()
    x = torch.randn(5, 8, dtype=torch.float64)
    out = lin(x)
    assert torch.equal(out, F.linear(x, lin.weight, lin.bias)) or torch.allclose(
        out, x @ lin.weight.T + lin.bias
    )
    d = xrt_torch.decision_log()[0]
    assert (d.op, d.node, d.chosen, d.rule) == ("matmul", "linear", "torch", "fallback")
    assert d.candidates[0].kernel == "cublasLt" and d.candidates[0].reason_code == "device_mismatch"
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    assert torch.equal(a @ b, torch.matmul(a, b))
    assert {x.node for x in xrt_torch.decision_log()} >= {"linear", "matmul"}


def test_require_mode_raises_naming_op_kernel_and_reason():
    xrt_torch.set_kernel_policy(matmul="cublasLt", mode="require")
    with pytest.raises(xpuruntime.UnsupportedOperationError, match=r"matmul.*cublasLt.*device_mismatch"):
        torch.mm(torch.randn(2, 3), torch.randn(3, 4))


def test_preference_list_takes_the_first_kernel_that_can_run():
    xrt_torch.set_kernel_policy(attention=["cudnn", "flash_v2"])
    q, k, v = _qkv(1)
    F.scaled_dot_product_attention(q, k, v)
    d = xrt_torch.decision_log()[0]
    assert d.chosen == "flash_v2" and d.rule == "policy.prefer"
    # The named kernels first, in the policy's order; then every other kernel the call
    # could run (the Dispatcher lists them all), torch's own among them.
    assert [(c.kernel, c.verdict) for c in d.candidates[:2]] == [
        ("cudnn", "rejected"),
        ("flash_v2", "supported"),
    ]
    assert d.candidate("torch").verdict == "supported"


def test_unsupported_torch_backend_falls_back_to_torch_default():
    xrt_torch.set_kernel_policy(attention="torch_flash")
    q, k, v = _qkv(2)
    out = F.scaled_dot_product_attention(q, k, v)
    d = xrt_torch.decision_log()[0]
    assert (d.chosen, d.rule) == ("torch", "fallback")
    xrt_torch.clear_kernel_policy()
    assert torch.equal(out, F.scaled_dot_product_attention(q, k, v))


@pytest.mark.parametrize("strategy", ["first_supported", "best_performance"])
def test_auto_chooses_and_records_the_rule(strategy):
    xrt_torch.set_kernel_policy(attention="auto", auto_strategy=strategy)
    q, k, v = _qkv(4)
    F.scaled_dot_product_attention(q, k, v)
    d = xrt_torch.decision_log()[0]
    assert d.chosen == "flash_v2" and d.rule == "auto.first_supported"
    if strategy == "best_performance":
        assert "timing skipped" in d.detail  # timing runs on CUDA tensors only


def test_unknown_kernel_name_is_a_policy_error():
    with pytest.raises(xpuruntime.PolicyError):
        xrt_torch.set_kernel_policy(attention="flash_v3")
    assert xrt_torch.get_kernel_policy() is None
    assert _mode_stack_len() == 0


def test_get_and_set_with_a_policy_object():
    policy = _core.KernelPolicy(attention="flash_v2", layernorm="fused")
    xrt_torch.set_kernel_policy(policy)
    assert xrt_torch.get_kernel_policy() is policy
    assert _core.Dispatcher.instance().get_policy() == policy
    with pytest.raises(TypeError):
        xrt_torch.set_kernel_policy(policy, matmul="torch")


# ---- clearing restores torch exactly --------------------------------------------------------
def test_clearing_restores_torch_exactly():
    before_stack = _mode_stack_len()
    q, k, v = _qkv(5)
    x = torch.randn(4, 16, dtype=torch.float64)
    plain = (F.scaled_dot_product_attention(q, k, v), F.layer_norm(x, (16,)), x @ x.T)
    xrt_torch.set_kernel_policy(attention="flash_v2", layernorm="fused", matmul="cublasLt")
    assert _mode_stack_len() == before_stack + 1
    routed = (F.scaled_dot_product_attention(q, k, v), F.layer_norm(x, (16,)), x @ x.T)
    n = len(xrt_torch.decision_log())
    assert n == 3
    xrt_torch.clear_kernel_policy()
    assert _mode_stack_len() == before_stack
    assert xrt_torch.get_kernel_policy() is None
    after = (F.scaled_dot_product_attention(q, k, v), F.layer_norm(x, (16,)), x @ x.T)
    for a, b in zip(plain, after):
        assert torch.equal(a, b)
    for a, b in zip(plain, routed):
        assert torch.allclose(a, b, atol=1e-12)
    assert len(xrt_torch.decision_log()) == n  # nothing routed, nothing recorded
    assert xrt_torch.routing_counts()["attention:flash_v2"] == 1


def test_set_none_clears():
    xrt_torch.set_kernel_policy(layernorm="fused")
    xrt_torch.set_kernel_policy(None)
    assert xrt_torch.get_kernel_policy() is None and _mode_stack_len() == 0


# ---- autocast and the precision hint -------------------------------------------------------
def test_autocast_sets_and_restores_the_precision_hint():
    xrt_torch.set_kernel_policy(layernorm="fused")
    x = torch.randn(4, 8)
    assert xrt_torch.get_precision_hint() == ""
    with xrt_torch.autocast(dtype=torch.bfloat16, device_type="cpu"):
        assert xrt_torch.get_precision_hint() == "bf16"
        assert torch.is_autocast_enabled("cpu")
        y = F.layer_norm(x, (8,))
    assert xrt_torch.get_precision_hint() == ""
    assert y.dtype == torch.float32  # autocast runs layer_norm in float32, so do we
    d = xrt_torch.decision_log()[0]
    assert "precision_hint=bf16" in d.detail
    with xrt_torch.autocast(enabled=False):
        assert xrt_torch.get_precision_hint() == ""
    with pytest.raises(ValueError), xrt_torch.autocast(dtype=torch.float32):
        pass


def test_autocast_casts_matmul_inputs_like_torch():
    xrt_torch.set_kernel_policy(attention="flash_v2")
    q, k, v = (t.float() for t in _qkv(6))
    with xrt_torch.autocast(dtype=torch.bfloat16, device_type="cpu"):
        out = F.scaled_dot_product_attention(q, k, v)
    assert out.dtype == torch.bfloat16
    d = xrt_torch.decision_log()[0]
    assert d.dtypes[:3] == ["bfloat16"] * 3


# ---- profile, graphs and the allocator on a CPU machine ---------------------------------------
def test_profile_writes_torch_and_xpuruntime_traces(tmp_path):
    path = str(tmp_path / "trace.json")
    xrt_torch.set_kernel_policy(layernorm="fused")
    with xrt_torch.profile(export_chrome_trace=path):
        F.layer_norm(torch.randn(4, 8), (8,))
    assert os.path.exists(path)
    with open(tmp_path / "trace_xrt.json") as f:
        ours = json.load(f)
    assert [d["chosen"] for d in ours["xpuruntime_decisions"]] == ["fused"]


def test_graph_wrapper_refuses_replay_before_capture():
    with pytest.raises(xpuruntime.XpuRuntimeError, match="nothing captured"):
        xrt_torch.CUDAGraphWrapper().replay()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal")
def test_set_allocator_without_cuda_names_the_reason():
    with pytest.raises(xpuruntime.BackendUnavailableError):
        xrt_torch.set_allocator()
    assert not xrt_torch.allocator_enabled()


# ---- lazy import -----------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["import xpuruntime.pytorch", "import xpuruntime; xpuruntime.pytorch"])
def test_import_without_torch_gives_the_install_instruction(how):
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # as if torch were not installed\n"
        "try:\n"
        f"    {how}\n"
        "except ImportError as e:\n"
        "    print('MSG:' + str(e))\n"
        "import xpuruntime\n"
        "print('TORCH_LOADED:' + str(sys.modules.get('torch') is not None))\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [os.path.join(os.path.dirname(xpuruntime.__file__), ".."), env.get("PYTHONPATH", "")] if p
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert f"MSG:{MSG}\n" in out.stdout, out.stdout + out.stderr
    assert "TORCH_LOADED:False" in out.stdout


def test_import_xpuruntime_does_not_import_torch():
    code = "import sys, xpuruntime; print('torch' in sys.modules)"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [os.path.join(os.path.dirname(xpuruntime.__file__), ".."), env.get("PYTHONPATH", "")] if p
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert out.stdout.strip() == "False", out.stderr
