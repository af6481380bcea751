"""GPU tests of our column-sum kernel (a linear layer's bias gradient, issue 5):
against float64 on fresh random inputs for float16/bfloat16, shapes that take the
vector path (GPT-2's 768/2304/3072 columns) and odd ones that take the scalar path,
row-strided views, no rows, bitwise repeatability, the refusals, and the routed
F.linear's bias gradient taking it.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import xpuruntime as xrt
import xpuruntime.pytorch as xrt_torch
from xpuruntime.pytorch.ops import _bridge
from xpuruntime.pytorch.ops.matmul import xrt_column_sums


def _skip_reason() -> str:
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    return _bridge.cuda_kernels_unavailable() or _bridge.capability_problem(0)


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_skip_reason()), reason=_skip_reason() or "ok")]
U_OUT = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


@pytest.fixture(autouse=True)
def _checking(monkeypatch):
    """Every prepared call checks its tensors against its case first (_launch.check)."""
    from xpuruntime.pytorch.ops import _launch

    monkeypatch.setattr(_launch, "CHECK", True)


def _check(got, x):
    """Within (rows + 4)·2^-24·Σ|x| (fp32 accumulation) + 2·u_out·|ref| of float64, per column."""
    x64 = x.double()
    ref, mag = x64.sum(0), x64.abs().sum(0)
    tol = 1.2 * ((x.shape[0] + 4) * 2.0**-24 * mag + 2 * U_OUT[x.dtype] * ref.abs()) + 1e-30
    err = (got.double() - ref).abs()
    assert got.dtype == x.dtype and got.shape == ref.shape
    assert bool((err <= tol).all()), f"max err {err.max().item():.3e} (tol {tol[err.argmax()].item():.3e})"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize(
    "rows,cols",
    [(8192, 768), (8192, 2304), (4096, 3072), (1, 768), (7, 16), (1000, 100), (4097, 776), (3, 5)],
)
def test_column_sums_match_float64(dtype, rows, cols):
    g = torch.Generator(device="cuda").manual_seed(rows * 7 + cols)
    x = (torch.randn(rows, cols, device="cuda", generator=g) + 0.5).to(dtype)  # a mean: sums grow
    got = _bridge.column_sums(x)
    _check(got, x)
    assert torch.equal(got, _bridge.column_sums(x)), "not bitwise repeatable"


def test_row_strided_views_and_no_rows():
    base = torch.randn(300, 1040, device="cuda", dtype=torch.bfloat16)
    view = base[:, 8:1032]  # row stride 1040, 16-byte aligned: vector path
    _check(_bridge.column_sums(view), view)
    odd = base[:, 1:1001]  # unaligned start: scalar path
    _check(_bridge.column_sums(odd), odd)
    empty = torch.empty(0, 64, device="cuda", dtype=torch.float16)
    assert torch.equal(_bridge.column_sums(empty), torch.zeros(64, device="cuda", dtype=torch.float16))


def test_refusals_are_typed_and_leave_the_output_alone():
    """The registry's column_sums kernel through _core.routed (the one path): a dtype its
    KernelDef does not take is refused when the case is prepared, a workspace smaller
    than it needs when it runs; the output is untouched and the kernel still usable."""
    from xpuruntime.pytorch.ops import _launch

    x = torch.randn(64, 32, device="cuda", dtype=torch.float16)
    out = torch.full((32,), 3.0, device="cuda", dtype=torch.float16)

    def ctx(t):
        return xrt._core.OpContext(
            "column_sums", [_launch.spec(t)], [_launch.spec(t[0])], device="cuda:0", capability=90
        )

    with pytest.raises(xrt.UnsupportedOperationError, match="dtype"):
        xrt._core.routed.PreparedCall("column_sums", ctx(x.float()))
    call = xrt._core.routed.PreparedCall("column_sums", ctx(x))
    assert call.workspace_bytes > 0
    ws = torch.empty(call.workspace_bytes, device="cuda", dtype=torch.uint8)
    stream = torch.cuda.current_stream().cuda_stream
    with pytest.raises(xrt.InvalidArgumentError, match="workspace"):
        call.run((x.data_ptr(),), (out.data_ptr(),), stream, ws.data_ptr(), 4)
    torch.cuda.synchronize()
    assert bool((out == 3.0).all())
    call.run((x.data_ptr(),), (out.data_ptr(),), stream, ws.data_ptr(), ws.numel())  # still usable
    _check(out, x)


def test_custom_op_and_routed_linear_bias_gradient():
    x = torch.randn(512, 96, device="cuda", dtype=torch.bfloat16)
    _check(xrt_column_sums(x), x)
    torch.library.opcheck(xrt_column_sums, (x,))
    inp = torch.randn(4, 128, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(96, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(96, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(4, 128, 96, device="cuda", dtype=torch.bfloat16)
    # (cublas has no bias epilogue: a linear with a bias runs on cublasLt or torch)
    xrt_torch.set_kernel_policy(matmul="cublasLt")
    xrt_torch.clear_decision_log()
    try:
        torch.nn.functional.linear(inp, w, b).backward(dy)
        assert {d.chosen for d in xrt_torch.decision_log() if d.op == "matmul"} == {"cublasLt"}
    finally:
        xrt_torch.clear_kernel_policy()
    _check(b.grad, dy.reshape(-1, 96))
