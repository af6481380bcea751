"""The "skinny" matmul kernel (ours: split-K tensor-core GEMM for M <= 16) on a GPU.

Against a float64 reference with the same bound as cuBLAS/cuBLASLt: M from 1 to
16, fp16 and bf16, B row-major (torch.matmul) and K-major (an nn.Linear weight
seen as w.t()), K and N that are not multiples of the tiles, odd sizes and
strides that force the element-load path, strided batches, column-major output,
fused bias/relu/gelu. Plus: the same bits run to run (fixed-order cluster
reduction), M > 16 refused with a reason, and best_performance timing it next to
cuBLAS/cuBLASLt (the caller's-stream test is in test_matmul_gpu.py).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the GPU matmul tests compare with torch tensors")

import xpuruntime as xrt
from test_matmul_gpu import _check, _require, _skip_reason, _torch
from xpuruntime import ops

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_skip_reason()), reason=_skip_reason() or "ok")]

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
SKINNY = _require("skinny")


def _rand(*shape, dt):
    return torch.randn(*shape, device="cuda").to(dt)


def _run(a, b, **kw):
    c = ops.matmul(a, b, policy=SKINNY, **kw)
    d = ops.last_decision()
    assert (d.chosen, d.rule) == ("skinny", "policy.require"), d
    return c


@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
@pytest.mark.parametrize("b_layout", ["row_major", "k_major"])
def test_against_float64_every_m_and_odd_shapes(dtype, b_layout):
    dt = DTYPES[dtype]
    shapes = [(m, 64 * m + 8, 512 + 64 * (m % 3)) for m in range(1, 17)]  # aligned, split K
    shapes += [(16, 4096, 4096), (3, 4104, 1032), (5, 136, 72)]  # tails of N and K tiles
    shapes += [(7, 130, 333), (1, 1, 1), (16, 33, 9), (2, 1000, 4097)]  # element-load path
    for m, n, k in shapes:
        a = _rand(m, k, dt=dt)
        b = _rand(k, n, dt=dt) if b_layout == "row_major" else _rand(n, k, dt=dt).t()
        _check(_torch(_run(a, b)), a, b)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_fused_bias_and_activation(dtype, activation):
    dt = DTYPES[dtype]
    for m, n, k in ((1, 768, 768), (16, 3072, 768), (9, 200, 136)):
        x = _rand(m, k, dt=dt)
        w = _rand(n, k, dt=dt)  # nn.Linear layout
        bias = _rand(n, dt=dt)
        y = _run(x, w.t(), bias=bias, activation=activation)
        _check(_torch(y), x, w.t(), bias=bias, activation=activation)


def test_strided_batches_transposed_a_and_column_major_out():
    for dt in DTYPES.values():
        big = _rand(4, 2, 12, 520, dt=dt)
        a = big[:, 1]  # batch stride 2*12*520, no copy
        b = _rand(4, 520, 264, dt=dt)
        _check(_torch(_run(a, b)), a, b)
        shared_b = _rand(520, 264, dt=dt)  # broadcast over the batch (stride 0)
        _check(_torch(_run(a, shared_b)), a, shared_b)
        at = _rand(520, 12, dt=dt).t()  # A with K strided: element-load path
        _check(_torch(_run(at, shared_b)), at, shared_b)
        out = torch.empty(264, 12, device="cuda", dtype=dt).t()  # column-major C
        _run(a[0], shared_b, out=out)
        _check(out, a[0], shared_b)


def test_same_bits_every_run():
    a = _rand(16, 4096, dt=torch.float16)
    w = _rand(4096, 4096, dt=torch.float16)
    bias = _rand(4096, dt=torch.float16)
    first = _torch(_run(a, w.t(), bias=bias, activation="gelu")).clone()
    for _ in range(10):
        again = _torch(_run(a, w.t(), bias=bias, activation="gelu"))
        assert torch.equal(first, again)


def test_refusals_say_why():
    a = _rand(17, 256, dt=torch.float16)
    b = _rand(256, 256, dt=torch.float16)
    with pytest.raises(xrt.UnsupportedOperationError) as e:
        ops.matmul(a, b, policy=SKINNY)
    assert "skinny" in str(e.value) and "M = 17 > 16" in str(e.value)
    with pytest.raises(xrt.UnsupportedOperationError) as e:
        ops.matmul(a.float()[:4], b.float(), policy=SKINNY)
    assert "skinny" in str(e.value) and "float32" in str(e.value)
    # prefer falls back to the next kernel and says why skinny was passed over
    ops.matmul(a, b, policy=xrt.KernelPolicy(matmul="skinny"))
    d = ops.last_decision()
    assert d.chosen != "skinny"
    assert d.candidate("skinny").reason_code == "shape_unsupported"


def test_best_performance_times_skinny_next_to_cublas():
    a = _rand(16, 4096, dt=torch.float16)
    b = _rand(4096, 4096, dt=torch.float16)
    xrt._core.Dispatcher.instance().clear_tuning_cache()
    c = ops.matmul(a, b, policy=xrt.KernelPolicy(auto_strategy="best_performance"))
    d = ops.last_decision()
    timed = {cand.kernel for cand in d.candidates if cand.time_ms is not None}
    assert {"skinny", "cublas", "cublasLt"} <= timed, d
    _check(_torch(c), a, b)
