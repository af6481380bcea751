"""_core.routed.PreparedCall: a registry kernel bound to one case, run on raw pointers.

The routed hot path runs the C++ registry's kernels (the ones inference plans run) on
torch tensors' data pointers with the case's shapes and strides (issue 31). On the CPU
the registry's CPU matmul kernels run through the same binding, so these tests check
the binding itself (views, strides, outputs, workspaces, errors) against float64
references; the CUDA kernels take the same path on the GPU (tests/gpu).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from xpuruntime import _core
from xpuruntime.pytorch.ops import _launch

pytestmark = pytest.mark.skipif(not _launch.available(), reason="this _core has no routed binding")


def _cpu_matmul_kernel() -> str:
    names = {d["name"] for d in _core.KernelRegistry.instance().list() if d["op"] == "matmul"}
    for name in ("cpu_blocked", "cpu_blas", "cpu_packed"):
        if name in names:
            return name
    pytest.skip(f"no CPU matmul kernel registered (matmul kernels: {sorted(names)})")


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float32)


def _context(inputs, outputs, attrs=None):
    return _core.OpContext(
        "matmul",
        [_launch.spec(t) for t in inputs],
        [_launch.spec(t) for t in outputs],
        device="cpu",
        attrs=attrs,
    )


@pytest.mark.parametrize("transposed_b", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_a_cpu_matmul_kernel_runs_on_torch_pointers(transposed_b, with_bias):
    kernel = _cpu_matmul_kernel()
    a = _rand(13, 37)
    w = _rand(29, 37, seed=1)
    b = w.t() if transposed_b else w.t().contiguous()  # F.linear's weight.t() is a strided view
    bias = _rand(29, seed=2) if with_bias else None
    out = torch.full((13, 29), float("nan"))
    inputs = [a, b] + ([bias] if with_bias else [])
    call = _core.routed.PreparedCall(kernel, _context(inputs, [out]))
    assert call.kernel == kernel
    _launch.run(call, inputs, [out], torch.device("cpu"), 0, 0)
    ref = a.double() @ b.double() + (bias.double() if with_bias else 0.0)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    # the same prepared call on other tensors of the case: only the pointers change
    a2 = _rand(13, 37, seed=5)
    inputs[0] = a2
    _launch.run(call, inputs, [out], torch.device("cpu"), 0, 0)
    ref2 = a2.double() @ b.double() + (bias.double() if with_bias else 0.0)
    torch.testing.assert_close(out.double(), ref2, rtol=1e-5, atol=1e-5)


def test_a_strided_output_view_is_written_in_place():
    kernel = _cpu_matmul_kernel()
    a, b = _rand(6, 8), _rand(8, 5, seed=3)
    big = torch.zeros(6, 12)
    out = big[:, 2:7]  # row stride 12: a strided output
    call = _core.routed.PreparedCall(kernel, _context([a, b], [out]))
    _launch.run(call, [a, b], [out], torch.device("cpu"), 0, 0)
    torch.testing.assert_close(out.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)
    assert torch.count_nonzero(big[:, :2]) == 0 and torch.count_nonzero(big[:, 7:]) == 0


def test_unknown_kernel_names_the_registered_ones():
    a, b, out = _rand(2, 3), _rand(3, 4), torch.empty(2, 4)
    with pytest.raises(_core.UnsupportedOperationError, match="no kernel 'no_such_kernel'.*registered"):
        _core.routed.PreparedCall("no_such_kernel", _context([a, b], [out]))


def test_a_case_the_kernel_cannot_run_is_refused_with_the_reason():
    kernel = _cpu_matmul_kernel()
    a, b = _rand(2, 3), _rand(4, 5)  # inner dimensions differ
    with pytest.raises(_core.UnsupportedOperationError, match=f"kernel '{kernel}' cannot run"):
        _core.routed.PreparedCall(kernel, _context([a, b], [torch.empty(2, 5)]))


def test_a_cuda_kernel_on_cpu_operands_is_refused():
    a, b, out = _rand(2, 3), _rand(3, 4), torch.empty(2, 4)
    names = {d["name"] for d in _core.KernelRegistry.instance().list() if d["op"] == "matmul"}
    if "cublasLt" not in names:
        with pytest.raises(_core.UnsupportedOperationError, match="no kernel 'cublasLt'"):
            _core.routed.PreparedCall("cublasLt", _context([a, b], [out]))
    else:
        with pytest.raises(_core.UnsupportedOperationError, match="device_mismatch"):
            _core.routed.PreparedCall("cublasLt", _context([a, b], [out]))


def test_wrong_pointer_counts_and_null_pointers_are_refused():
    kernel = _cpu_matmul_kernel()
    a, b, out = _rand(2, 3), _rand(3, 4), torch.empty(2, 4)
    call = _core.routed.PreparedCall(kernel, _context([a, b], [out]))
    with pytest.raises(_core.InvalidArgumentError, match="2 inputs and 1 outputs, the call passed 1 and 1"):
        call.run((a.data_ptr(),), (out.data_ptr(),))
    with pytest.raises(_core.InvalidArgumentError, match="null pointer"):
        call.run((a.data_ptr(), 0), (out.data_ptr(),))


def test_the_strides_of_size_one_dimensions_are_normalised():
    # torch gives size-1 dimensions arbitrary strides; they never move the view
    t = torch.empty(5, 1, 7)[:, :, :]
    assert _launch.strides(t) == (7, 7, 1)
    col = torch.empty(1, 9).t()  # [9, 1], strides (1, 9)
    assert _launch.strides(col) == (1, 1)
    assert _launch.strides(torch.empty(4, 6).t()) == (1, 6)


@pytest.mark.parametrize(
    "a_shape,a_kind,b_kind,with_bias",
    [
        ((13, 37), "contiguous", "weight_t", True),  # F.linear's forward
        ((2, 5, 37), "contiguous", "weight_t", True),  # 3-D input: rows = 2 * 5
        ((37, 13), "transposed", "contiguous", False),  # a weight gradient: g^T @ x
        ((2, 5, 37), "sliced", "weight_t", False),  # a non-contiguous input: reshaped
        ((1, 37), "contiguous", "weight_t", True),  # one row (its stride is free)
    ],
)
def test_the_matmul_hot_path_runs_the_registry_kernel_on_torch_operands(a_shape, a_kind, b_kind, with_bias):
    """ops/matmul.py's _run_prepared (the CUDA hot path's code) on CPU tensors with the
    registry's CPU kernel: operand layouts as routed linears and their gradients hand
    them, against float64."""
    from xpuruntime.pytorch.ops import matmul

    kernel = _cpu_matmul_kernel()
    if a_kind == "transposed":
        a = _rand(*reversed(a_shape)).t()
    elif a_kind == "sliced":
        a = _rand(*a_shape[:-1], 2 * a_shape[-1])[..., ::2]
    else:
        a = _rand(*a_shape)
    w = _rand(29, a.shape[-1], seed=1)
    b = w.t() if b_kind == "weight_t" else w.t().contiguous()
    bias = _rand(29, seed=2) if with_bias else None
    _launch.clear()
    got = matmul._run_prepared(a, b, bias, kernel, 0)
    assert got is not None and got.shape == (*a.shape[:-1], 29)
    want = a.double() @ b.double() + (bias.double() if with_bias else 0.0)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    again = matmul._run_prepared(a, b, bias, kernel, 0)  # the case's prepared call, reused
    assert len(_launch._calls) == 1
    assert torch.equal(again, got)


def test_the_matmul_hot_path_leaves_batched_and_empty_forms_to_the_general_path():
    from xpuruntime.pytorch.ops import matmul

    kernel = _cpu_matmul_kernel()
    assert matmul._run_prepared(_rand(2, 3, 4), _rand(2, 4, 5), None, kernel, 0) is None
    assert matmul._run_prepared(torch.empty(0, 4), _rand(4, 5), None, kernel, 0) is None
