"""``xpuruntime::matmul``: torch matmuls on our cuBLASLt / cuBLAS kernels.

The matmul kernels live in ``_core.ops`` (``matmul_with_kernel``: NumPy matmul
semantics, an optional bias fused as a cuBLASLt epilogue). This custom op wraps
them for torch: it runs them on torch's current stream (our runtime's current
stream is set to a borrowed handle of it for the call), writes into a tensor
torch allocated, and carries an autograd formula whose gradient products use
the same kernel. The CPU implementation is the float reference (so CI tests the
dispatch and autograd paths); the kernels themselves are CUDA-only.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ... import _core
from . import _bridge

__all__ = ["matmul_forward", "matmul_support", "xrt_matmul", "xrt_matmul_row_sums"]

MATMUL_KERNELS = ("cublasLt", "cublas")
# What cuBLAS/cuBLASLt get by default in _core (kCublasLtDefaultWorkspace: 32 MiB,
# cuBLAS's recommendation for Hopper).
_WORKSPACE_BYTES = 32 << 20
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _out_shape(a: Tensor, b: Tensor) -> tuple[int, ...]:
    # The common cases without torch.broadcast_shapes, which costs tens of
    # microseconds of host time (it runs through torch._refs) on every call.
    if b.dim() == 2 or a.shape[:-2] == b.shape[:-2]:
        return (*a.shape[:-1], b.shape[-1])
    if a.dim() == 2:
        return (*b.shape[:-2], a.shape[-2], b.shape[-1])
    batch = torch.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    return (*batch, a.shape[-2], b.shape[-1])


def matmul_support(kernel: str, a: Tensor, b: Tensor, bias: Tensor | None = None) -> tuple[str, str] | None:
    """Why ``kernel`` (cublasLt or cublas) cannot run ``a @ b (+ bias)``, or None."""
    if a.device.type != "cuda" or b.device != a.device or (bias is not None and bias.device != a.device):
        return "device_mismatch", f"{kernel} runs CUDA tensors (got {a.device})"
    if a.dim() < 2 or b.dim() < 2:
        return "shape_unsupported", "operands must have at least 2 dimensions (torch handles vectors)"
    if a.shape[-1] != b.shape[-2]:
        return "shape_unsupported", f"inner dimensions differ: {tuple(a.shape)} @ {tuple(b.shape)}"
    try:
        _out_shape(a, b)
    except RuntimeError:
        return "shape_unsupported", "batch dimensions do not broadcast"
    if a.dtype != b.dtype or (bias is not None and bias.dtype != a.dtype):
        return "dtype_unsupported", "operands (and bias) must share one dtype"
    if a.dtype not in _DTYPES:
        return "dtype_unsupported", f"{kernel} takes float16/bfloat16/float32, got {a.dtype}"
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != b.shape[-1]):
        return "shape_unsupported", "bias must be 1-D with one value per output column"
    ops = getattr(_core, "ops", None)
    if ops is None or not hasattr(ops, "matmul_with_kernel"):
        return (
            "backend_unavailable",
            "this build of _core has no matmul kernels (_core.ops.matmul_with_kernel)",
        )
    return None


def _run_cuda(
    a: Tensor, b: Tensor, bias: Tensor | None, kernel: str, row_sums: Tensor | None = None
) -> Tensor:
    from ...runtime.stream import use_stream

    index = a.device.index if a.device.index is not None else torch.cuda.current_device()
    if index != torch.cuda.current_device():
        with torch.cuda.device(index):
            return _run_cuda(a, b, bias, kernel, row_sums)
    out = torch.empty(_out_shape(a, b), device=a.device, dtype=a.dtype)
    # The kernel's scratch comes from torch's caching allocator, which knows about
    # streams and CUDA-graph pools: under capture it lives in the graph's private
    # pool, so a replay never shares it with memory allocated after the capture.
    workspace = torch.empty(_WORKSPACE_BYTES, device=a.device, dtype=torch.uint8)
    with use_stream(_core.Stream.wrap(f"cuda:{index}", _bridge.raw_stream(index))):
        # detached views: DLPack refuses tensors that require grad (autograd is ours, above)
        _core.ops.matmul_with_kernel(
            kernel,
            a.detach(),
            b.detach(),
            bias=bias.detach() if bias is not None else None,
            out=out,
            workspace=workspace,
            a_row_sums=row_sums,
        )
    return out


# (device, dtype, m, n, k, strides) of products cuBLASLt offered no BGRAD algorithm for:
# those take the unfused pair from then on instead of raising on every step.
_ROW_SUMS_UNAVAILABLE: set[tuple] = set()


def _run_cuda_row_sums(a: Tensor, b: Tensor, kernel: str) -> tuple[Tensor, Tensor]:
    """(a @ b, a.sum(-1)) for 2-D operands: one cuBLASLt GEMM with the BGRAD epilogue."""
    key = (a.device, a.dtype, *a.shape, b.shape[1], *a.stride(), *b.stride())
    if key not in _ROW_SUMS_UNAVAILABLE:
        sums = torch.empty(a.shape[0], device=a.device, dtype=a.dtype)
        try:
            return _run_cuda(a, b, None, kernel, sums), sums
        except _core.UnsupportedOperationError:
            _ROW_SUMS_UNAVAILABLE.add(key)  # raised before anything was enqueued
    return _run_cuda(a, b, None, kernel), a.sum(-1)


@_bridge.custom_op("xpuruntime::matmul_row_sums", mutates_args=(), device_types="cpu")
def xrt_matmul_row_sums(a: Tensor, b: Tensor, kernel: str) -> tuple[Tensor, Tensor]:
    """``(a @ b, a.sum(-1))`` for 2-D operands, on CUDA one cuBLASLt GEMM whose BGRAD
    epilogue writes the row sums (a linear layer's weight and bias gradients in one
    pass over the output gradient). CPU: the float reference."""
    return torch.matmul(a, b), a.sum(-1)


@xrt_matmul_row_sums.register_kernel("cuda")
def _(a, b, kernel):
    return _run_cuda_row_sums(a, b, kernel)


@xrt_matmul_row_sums.register_fake
def _(a, b, kernel):
    return a.new_empty(a.shape[0], b.shape[1]), a.new_empty(a.shape[0])


@_bridge.custom_op("xpuruntime::matmul", mutates_args=(), device_types="cpu")
def xrt_matmul(a: Tensor, b: Tensor, bias: Tensor | None, kernel: str) -> Tensor:
    """``a @ b (+ bias)`` on ``kernel``. CPU: the float reference (no CUDA kernel runs)."""
    out = torch.matmul(a, b)
    return out + bias if bias is not None else out


@xrt_matmul.register_kernel("cuda")
def _(a, b, bias, kernel):
    return _run_cuda(a, b, bias, kernel)


@xrt_matmul.register_fake
def _(a, b, bias, kernel):
    return a.new_empty(_out_shape(a, b))


def _sum_to(t: Tensor, shape: torch.Size) -> Tensor:
    """Sums a broadcast gradient back to ``shape``."""
    while t.dim() > len(shape):
        t = t.sum(0)
    for i, n in enumerate(shape):
        if n == 1 and t.shape[i] != 1:
            t = t.sum(i, keepdim=True)
    return t


def _setup_context(ctx, inputs, output) -> None:
    a, b, bias, kernel = inputs
    ctx.save_for_backward(a, b)
    ctx.kernel = kernel
    ctx.has_bias = bias is not None


def _grads(
    ctx,
    grad,
    mm: Callable[[Tensor, Tensor, Tensor | None, str], Tensor],
    mm_row_sums: Callable[[Tensor, Tensor, str], tuple[Tensor, Tensor]],
):
    """(da, db, dbias, None) with the gradient products computed by ``mm`` (and
    ``mm_row_sums`` where the bias gradient rides along the weight gradient)."""
    a, b = ctx.saved_tensors
    grad = grad.contiguous()
    da = db = dbias = None
    want_dbias = ctx.has_bias and ctx.needs_input_grad[2]
    if ctx.needs_input_grad[0]:
        da = _sum_to(mm(grad, b.transpose(-1, -2), None, ctx.kernel), a.shape)
    if ctx.needs_input_grad[1]:
        if b.dim() == 2:  # the linear case: one GEMM over all leading dimensions
            k, n = b.shape
            a2, g2 = a.reshape(-1, k), grad.reshape(-1, n)
            if b.stride(0) == 1 and b.stride(1) == k and k > 1:
                # b is weight.t() of an nn.Linear weight [n, k]: compute the weight's
                # gradient in the weight's own layout (g^T a) and hand back its
                # transpose, so the gradient autograd accumulates is contiguous and no
                # strided copy of every weight gradient runs after the backward.
                if want_dbias and _bias_grad_fusable(g2, ctx.kernel):
                    # The bias gradient (the row sums of g^T) from the same call's
                    # BGRAD epilogue. On Hopper cuBLASLt runs that reduction as a
                    # kernel of its own: 0.63 ms for the 48 bias gradients of a
                    # GPT-2-small step on an H200, against 0.71 ms on skinny below
                    # (benchmarks/results/gpt2_profile_NVIDIA_H200.json).
                    w, dbias = mm_row_sums(g2.transpose(0, 1), a2, ctx.kernel)
                    db = w.transpose(0, 1)
                else:
                    db = mm(g2.transpose(0, 1), a2, None, ctx.kernel).transpose(0, 1)
            else:
                db = mm(a2.transpose(0, 1), g2, None, ctx.kernel)
        else:
            db = _sum_to(mm(a.transpose(-1, -2), grad, None, ctx.kernel), b.shape)
    if want_dbias and dbias is None:
        g2 = grad.reshape(-1, grad.shape[-1])
        if _column_sums_by_gemm(g2):
            # The bias gradient (column sums of the output gradient) as the GEMM
            # ones[1, tokens] @ g on our skinny kernel: one stream over g, fp32
            # accumulation like torch's sum. In the GPT-2-small step on an H200 the
            # 48 bias gradients took 0.71 ms this way and 1.05 ms through torch's
            # column reduction (profile of 2026-11-23, before the BGRAD path above).
            dbias = mm(g2.new_ones(1, g2.shape[0]), g2, None, "skinny").reshape(-1)
        else:
            dbias = g2.sum(0)
    return da, db, dbias, None


_SM90: dict[int, bool] = {}


def _bias_grad_fusable(g2: Tensor, kernel: str) -> bool:
    """Whether cuBLASLt's BGRAD epilogue takes the bias gradient (fp16/bf16 on CUDA)."""
    return kernel == "cublasLt" and g2.device.type == "cuda" and g2.dtype in (torch.float16, torch.bfloat16)


def _column_sums_by_gemm(g2: Tensor) -> bool:
    """Whether the skinny kernel (fp16/bf16, compute capability 9.0) takes g2's column sums."""
    if g2.device.type != "cuda" or g2.dtype not in (torch.float16, torch.bfloat16) or g2.shape[0] < 2:
        return False
    index = g2.device.index if g2.device.index is not None else torch.cuda.current_device()
    if index not in _SM90:
        _SM90[index] = torch.cuda.get_device_capability(index) == (9, 0)
    return _SM90[index]


def _backward(ctx, grad):
    return _grads(ctx, grad, xrt_matmul, xrt_matmul_row_sums)


xrt_matmul.register_autograd(_backward, setup_context=_setup_context)


# ---- eager fast path (see _bridge.eager_direct_ok) ------------------------------------------
class _DirectMatmul(torch.autograd.Function):
    """The CUDA kernels called directly, with the custom op's gradient formula."""

    @staticmethod
    def forward(ctx, a, b, bias, kernel):  # type: ignore[override]
        _setup_context(ctx, (a, b, bias, kernel), None)
        return _run_cuda(a, b, bias, kernel)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        if torch.is_grad_enabled() or not _bridge.eager_direct_ok(grad, *ctx.saved_tensors):
            return _backward(ctx, grad)  # create_graph, or a mode that must see the op
        return _grads(ctx, grad, _run_cuda, _run_cuda_row_sums)


def matmul_forward(a: Tensor, b: Tensor, bias: Tensor | None, kernel: str) -> Tensor:
    """``a @ b (+ bias)`` on ``kernel`` for a supported case, on the cheapest equivalent path."""
    if a.device.type == "cuda" and _bridge.eager_direct_ok(a, b, bias):
        grad = torch.is_grad_enabled() and (
            a.requires_grad or b.requires_grad or (bias is not None and bias.requires_grad)
        )
        return _DirectMatmul.apply(a, b, bias, kernel) if grad else _run_cuda(a, b, bias, kernel)
    return xrt_matmul(a, b, bias, kernel)
