"""Golden files for explain(): a fixed registry and fixed policies give byte-identical
tables and JSON. Any change to rules, reason codes, candidate order or the table
format shows up here as a diff.

Regenerate after an intended change (then review the diff):

    XRT_UPDATE_GOLDEN=1 python -m pytest tests/python/test_dispatch_golden.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import xpuruntime as xrt
from xpuruntime import ExecutionPolicy, KernelPolicy, UnsupportedOperationError

_core = xrt._core
GOLDEN = Path(__file__).parent / "golden"


def _never_run(*args, **kwargs):  # selection only: these kernels are never executed
    raise AssertionError("golden tests only select")


def _fixed_registry():
    reg = _core.KernelRegistry()
    r = xrt.kernels.register
    # matmul: two CPU kernels, two CUDA kernels (cublasLt needs sm80+ and fp16/bf16).
    r(
        "matmul",
        "cpu_blas",
        _never_run,
        dtypes=["float32", "float64"],
        layouts=["contiguous", "transposed"],
        priority=20,
        registry=reg,
    )
    r("matmul", "cpu_blocked", _never_run, priority=10, registry=reg)
    r(
        "matmul",
        "cublasLt",
        _never_run,
        device="cuda",
        dtypes=["float16", "bfloat16"],
        min_capability=80,
        workspace_bytes=1 << 22,
        priority=30,
        registry=reg,
    )
    r("matmul", "cublas", _never_run, device="cuda", priority=25, registry=reg)
    # attention: flash_v2 (head_dim <= 128, not deterministic in backward-like use), cudnn, math.
    r(
        "attention",
        "flash_v2",
        _never_run,
        device="cuda",
        dtypes=["float16", "bfloat16"],
        min_capability=80,
        deterministic=False,
        priority=30,
        supports=lambda ctx: (ctx.inputs[0].shape[-1] <= 128, f"head_dim {ctx.inputs[0].shape[-1]} > 128"),
        registry=reg,
    )
    r(
        "attention",
        "cudnn",
        _never_run,
        device="cuda",
        dtypes=["float16", "bfloat16"],
        min_capability=90,
        priority=20,
        registry=reg,
    )
    r("attention", "math", _never_run, device="cuda", priority=0, registry=reg)
    # layernorm: a fused kernel with a workspace, and a plain one.
    r("layernorm", "fused", _never_run, device="cuda", workspace_bytes=65536, priority=10, registry=reg)
    r("layernorm", "torch", _never_run, device="cuda", priority=0, registry=reg)
    return reg


def _cases(d):
    """Selections covering every rule and the main reason codes."""
    sel = xrt.dispatch.select
    mm16 = [("float16", [16, 4096]), ("float16", [4096, 4096])]
    out16 = [("float16", [16, 4096])]
    attn = [("bfloat16", [4, 16, 1024, 128])] * 3
    attn256 = [("bfloat16", [4, 16, 1024, 256])] * 3
    ln = [("float16", [8192, 1024]), ("float16", [1024]), ("float16", [1024])]

    # 1. require honoured.
    sel(
        "matmul",
        mm16,
        out16,
        device="cuda:0",
        capability=90,
        node="proj",
        policy=KernelPolicy(matmul="cublasLt", mode="require"),
        dispatcher=d,
    )
    # 2. prefer falls back on an older GPU (capability_too_low).
    sel(
        "matmul",
        mm16,
        out16,
        device="cuda:0",
        capability=75,
        node="proj",
        policy=KernelPolicy(matmul="cublasLt"),
        dispatcher=d,
    )
    # 3. auto on the CPU: CUDA kernels are device_mismatch, fp16 is dtype_unsupported for cpu_blas.
    sel("matmul", [("float16", [8, 8]), ("float16", [8, 8])], device="cpu", node="cpu_mm", dispatcher=d)
    # 4. a transposed operand is fine for cpu_blas (layout listed).
    sel("matmul", [("float32", [8, 4]), ("float32", [4, 6], [1, 4])], device="cpu", node="mm_t", dispatcher=d)
    # 5. ordered preferences: flash_v2 cannot take head_dim 256, cudnn can.
    sel(
        "attention",
        attn256,
        device="cuda:0",
        capability=90,
        node="sdpa",
        policy=KernelPolicy(attention=["flash_v2", "cudnn"]),
        dispatcher=d,
    )
    # 6. determinism asked: flash_v2 is rejected as nondeterministic; cudnn needs sm90 -> math.
    sel(
        "attention",
        attn,
        device="cuda:0",
        capability=80,
        node="sdpa",
        exec_policy=ExecutionPolicy(deterministic=True),
        policy=KernelPolicy(attention=["flash_v2", "auto"]),
        dispatcher=d,
    )
    # 7. a workspace limit rejects the fused layernorm.
    sel(
        "layernorm",
        ln,
        device="cuda:0",
        capability=90,
        node="ln1",
        exec_policy=ExecutionPolicy(workspace_limit_bytes=4096),
        attrs={"epsilon": 1e-5},
        dispatcher=d,
    )
    # 8. a pin for this exact case.
    ctx = _core.OpContext("matmul", mm16, out16, device="cuda:0", capability=90)
    pinned = KernelPolicy(pins={ctx.case_key(): {"kernel": "cublas", "algorithm": "heuristic#3"}})
    sel("matmul", mm16, out16, device="cuda:0", capability=90, node="proj", policy=pinned, dispatcher=d)
    # 9. require that cannot be met: raises, and the failure is recorded.
    with pytest.raises(UnsupportedOperationError):
        sel(
            "attention",
            attn,
            device="cuda:0",
            capability=75,
            node="sdpa",
            policy=KernelPolicy(attention="flash_v2", mode="require"),
            dispatcher=d,
        )


def _check(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("XRT_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"golden file {path} is missing: run with XRT_UPDATE_GOLDEN=1 to create it"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, (
        f"explain() output differs from {path}; if the change is intended, regenerate with "
        "XRT_UPDATE_GOLDEN=1 and review the diff"
    )


def test_explain_golden_table_and_json():
    d = _core.Dispatcher(_fixed_registry())
    _cases(d)
    log = xrt.dispatch.explain(dispatcher=d)
    assert len(log) == 9
    _check("explain_table.txt", log.to_table(style="plain") + "\n")
    _check("explain_decisions.json", log.to_json() + "\n")
    # The rules we expect, as objects (independent of the golden text).
    assert [x.rule for x in log] == [
        "policy.require",
        "fallback",
        "auto.first_supported",
        "auto.first_supported",
        "policy.prefer",
        "auto.first_supported",
        "auto.first_supported",
        "pinned",
        "none",
    ]
    assert [x.chosen for x in log] == [
        "cublasLt",
        "cublas",
        "cpu_blocked",
        "cpu_blas",
        "cudnn",
        "math",
        "torch",
        "cublas",
        "",
    ]


def test_explain_is_the_same_in_a_second_run():
    # Deterministic: a fresh registry and dispatcher reproduce the identical log.
    texts = []
    for _ in range(2):
        d = _core.Dispatcher(_fixed_registry())
        _cases(d)
        texts.append(xrt.dispatch.explain(dispatcher=d).to_json())
    assert texts[0] == texts[1]


def test_rich_table_renders_the_same_decisions():
    pytest.importorskip("rich", reason="rich is not installed")
    d = _core.Dispatcher(_fixed_registry())
    _cases(d)
    text = xrt.dispatch.explain(dispatcher=d).to_table(style="rich")
    assert "\x1b[" in text  # styled
    for name in ("cublasLt", "capability_too_low", "workspace_exceeded", "pinned"):
        assert name in text
