"""``xpuruntime::matmul``: torch matmuls on the registry's cuBLASLt / cuBLAS kernels.

A product with a 2-D right operand (every linear layer and its gradients) runs the
registry kernel through ``_core.routed.PreparedCall`` on the tensors' pointers, on
torch's current stream, with a workspace from torch's allocator (:mod:`._launch`);
a routed call's case keeps its prepared GEMMs (:class:`CaseSlots`). Batched right
operands go through ``_core.ops.matmul_with_kernel`` on DLPack views. The custom op
carries an autograd formula whose gradient products use the same kernel, and the bias
gradient our column-sum kernel. The CPU implementation is the float reference (so CI
tests the dispatch and autograd paths); the kernels themselves are CUDA-only.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ... import _core
from .._calls import output_shape
from . import _bridge, _launch

__all__ = ["CaseSlots", "matmul_forward", "xrt_column_sums", "xrt_matmul"]

MATMUL_KERNELS = ("cublasLt", "cublas")
# What cuBLAS/cuBLASLt get by default in _core (kCublasLtDefaultWorkspace: 32 MiB,
# cuBLAS's recommendation for Hopper).
_WORKSPACE_BYTES = 32 << 20


def _blas_addressable(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """A 2-D operand BLAS reads in place: one unit stride, the other a valid leading dimension."""
    (r, c), (sr, sc) = shape, strides
    return (sc == 1 and sr >= max(c, 1)) or (sr == 1 and sc >= max(r, 1))


def _rows(a: Tensor, k: int) -> tuple[Tensor, tuple[int, int], tuple[int, ...]]:
    """``a`` as one GEMM operand [rows, k]: (tensor, shape, strides). A contiguous ``a``
    is described as 2-D without a view op; another is reshaped (a copy when it must be)."""
    if a.is_contiguous():
        return a, (a.numel() // k, k), (k, 1)
    a2 = a if a.dim() == 2 else a.reshape(-1, k)
    st = _launch.strides(a2)
    if not _blas_addressable(tuple(a2.shape), st):
        a2 = a2.contiguous()
        st = (k, 1)
    return a2, tuple(a2.shape), st


class _Gemm:
    """One prepared GEMM case of the hot path: the registry kernel's PreparedCall for
    ``a2 @ b (+ bias)`` (a2: ``a``'s leading dimensions as rows) and what a run needs
    besides the pointers, so a run is one allocation (the output) and one launch."""

    __slots__ = ("call", "cuda", "device", "dtype", "index", "ws_bytes")

    def __init__(self, call: object, a: Tensor, index: int) -> None:
        self.call = call
        self.dtype, self.device = a.dtype, a.device
        self.cuda = a.device.type == "cuda"
        self.index = index if self.cuda else -1
        self.ws_bytes = int(call.workspace_bytes)

    def run(self, a2: Tensor, b: Tensor, bias: Tensor | None, out_shape: tuple[int, ...]) -> Tensor:
        """Runs the case on tensors in its layout; returns the output (``out_shape``)."""
        out = a2.new_empty(out_shape)  # a2 is of the case: its dtype and device (~1 us less than torch.empty)
        stream = _raw_stream(self.index) if self.cuda else 0
        ws, nbytes = _launch.workspace(self.device, self.index, stream, self.ws_bytes)
        if _launch.CHECK:
            _launch.check(self.call, (a2, b) if bias is None else (a2, b, bias), (out,))
        if bias is None:
            self.call.run([a2.data_ptr(), b.data_ptr()], [out.data_ptr()], stream, ws, nbytes)
        else:
            self.call.run(
                [a2.data_ptr(), b.data_ptr(), bias.data_ptr()], [out.data_ptr()], stream, ws, nbytes
            )
        return out


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or _bridge.raw_stream


def _run_prepared(
    a: Tensor, b: Tensor, bias: Tensor | None, kernel: str, index: int, slot: list | None = None
) -> Tensor | None:
    """``a @ b (+ bias)`` for a 2-D ``b`` on the registry kernel ``kernel`` (the one hot
    path: _launch), or None for a form it leaves to :func:`_run_dlpack` (batched ``b``,
    empty operands). ``a``'s leading dimensions are one GEMM's rows. CUDA tensors run on
    torch's current stream of device ``index``; CPU tensors (tests: the registry's CPU
    kernels through the same code) on the calling thread.

    ``slot`` (a one-element list) belongs to a routed call's case, whose tensors routing
    has checked to be of one dtype, shape and layout: a case whose operands are used as
    they come (``a`` contiguous or an addressable 2-D view, ``b`` addressable, the bias
    unit-strided) is stored there as ``(gemm, output shape)``, and :func:`_run_cuda`
    runs the case's later calls from it without the checks and the key below."""
    if b.dim() != 2 or a.dim() < 2:
        return None
    k, n = b.shape
    if k == 0 or n == 0:
        return None
    a2, a_shape, sa = _rows(a, k)
    if a_shape[0] == 0:
        return None
    direct = a2 is a
    sb = _launch.strides(b)
    if not _blas_addressable((k, n), sb):
        b = b.contiguous()
        sb = (n, 1)
        direct = False
    if bias is not None and n > 1 and bias.stride(0) != 1:
        bias = bias.contiguous()
        direct = False
    cuda = a.device.type == "cuda"
    # Everything the prepared case depends on: both operands' shapes and strides (b's
    # shape is not implied by a's: the projections of one layer share a and b's
    # strides and differ in n), and the bias's dtype.
    key = (
        "matmul", kernel, a.dtype, index if cuda else -1, a_shape, sa, k, n, sb,
        None if bias is None else bias.dtype,
    )  # fmt: skip
    gemm = _launch._calls.get(key)
    if gemm is None:
        name = _launch.DTYPE_NAMES[a.dtype]

        def context() -> object:
            inputs = [(name, list(a_shape), list(sa)), (name, [k, n], list(sb))]
            if bias is not None:
                inputs.append((name, [n], [1]))
            return _core.OpContext(
                "matmul",
                inputs,
                [(name, [a_shape[0], n], [n, 1])],
                device=f"cuda:{index}" if cuda else "cpu",
                capability=_bridge.capability(index) if cuda else 0,
                node="torch.matmul",
            )

        gemm = _launch._calls[key] = _Gemm(_launch.prepared(key, kernel, context), a, index)
    out_shape = (*a.shape[:-1], n)
    if slot is not None and direct:
        slot[0] = (gemm, out_shape)
    return gemm.run(a2, b, bias, out_shape)


def _run_dlpack(a: Tensor, b: Tensor, bias: Tensor | None, kernel: str, index: int) -> Tensor:
    """The batched forms (``b`` with batch dimensions): _core.ops.matmul_with_kernel, which
    broadcasts and lays out the batches, on DLPack views of torch's tensors."""
    from ...runtime.stream import use_stream

    out = torch.empty(output_shape(a, b), device=a.device, dtype=a.dtype)
    stream = _bridge.raw_stream(index)
    workspace = _launch.workspace_tensor(a.device, index, stream, _WORKSPACE_BYTES)
    with use_stream(_core.Stream.wrap(f"cuda:{index}", stream)):
        # detached views: DLPack refuses tensors that require grad (autograd is ours, above)
        _core.ops.matmul_with_kernel(
            kernel,
            a.detach(),
            b.detach(),
            bias=bias.detach() if bias is not None else None,
            out=out,
            workspace=workspace,
        )
    return out


_current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def _run_cuda(a: Tensor, b: Tensor, bias: Tensor | None, kernel: str, slot: list | None = None) -> Tensor:
    """``a @ b (+ bias)`` of CUDA tensors on ``kernel``; ``slot``: see :func:`_run_prepared`
    (a hit there is the whole call: one allocation and one launch)."""
    if slot is not None:
        hit = slot[0]
        if hit is not None and hit[0].index == _current_device():
            return hit[0].run(a, b, bias, hit[1])
    index = a.device.index if a.device.index is not None else torch.cuda.current_device()
    if index != torch.cuda.current_device():
        with torch.cuda.device(index):
            return _run_cuda(a, b, bias, kernel)
    out = _run_prepared(a, b, bias, kernel, index, slot)
    return out if out is not None else _run_dlpack(a, b, bias, kernel, index)


@_bridge.custom_op("xpuruntime::matmul", mutates_args=(), device_types="cpu")
def xrt_matmul(a: Tensor, b: Tensor, bias: Tensor | None, kernel: str) -> Tensor:
    """``a @ b (+ bias)`` on ``kernel``. CPU: the float reference (no CUDA kernel runs)."""
    out = torch.matmul(a, b)
    return out + bias if bias is not None else out


@_bridge.cuda_kernel(xrt_matmul)
def _(a, b, bias, kernel):
    return _run_cuda(a, b, bias, kernel)


@xrt_matmul.register_fake
def _(a, b, bias, kernel):
    return a.new_empty(output_shape(a, b))


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


class CaseSlots:
    """What the hot path keeps for one routed call's case (routing checked its tensors:
    one dtype, shape and layout per argument), filled on first use: the forward GEMM
    and, for its backward, the two gradient GEMMs and the bias gradient's column sums
    (the gradient is made contiguous, so their layouts follow from the case).

    ``linear_bwd``: for a routed ``F.linear`` (:mod:`.linear`), the device index
    its backward runs from the slots alone on the tensors' pointers (no view ops, no
    layout checks), or None until a first backward of the case has shown it can: the
    input and the weight contiguous (so the input's rows and the weight's gradient in
    its own layout are the GEMM operands as they come), every gradient GEMM it needs
    prepared."""

    __slots__ = ("da", "db", "dbias", "fwd", "linear_bwd")

    def __init__(self) -> None:
        self.fwd: list = [None]
        self.da: list = [None]
        self.db: list = [None]
        self.dbias: list = [None]
        self.linear_bwd: int | None = None


def _grads(
    ctx,
    a: Tensor,
    b: Tensor,
    grad: Tensor,
    mm: Callable[..., Tensor],
    col_sums: Callable[..., Tensor],
    slots: CaseSlots | None = None,
):
    """(da, db, dbias, None) of ``a @ b (+ bias)``: the gradient products computed by
    ``mm``, the bias gradient (the output gradient's column sums) by ``col_sums``. With
    ``slots`` (the direct path of a routed case) ``mm`` and ``col_sums`` get the case's
    slot of each."""
    grad = grad.contiguous()
    da = db = dbias = None
    want_dbias = ctx.has_bias and ctx.needs_input_grad[2]
    extra = (lambda s: (s,)) if slots is not None else (lambda s: ())
    if ctx.needs_input_grad[0]:
        da = _sum_to(mm(grad, b.transpose(-1, -2), None, ctx.kernel, *extra(slots and slots.da)), a.shape)
    if ctx.needs_input_grad[1]:
        db_slot = extra(slots and slots.db)
        if b.dim() == 2:  # the linear case: one GEMM over all leading dimensions
            k, n = b.shape
            a2, g2 = a.reshape(-1, k), grad.reshape(-1, n)
            if b.stride(0) == 1 and b.stride(1) == k and k > 1:
                # b is weight.t() of an nn.Linear weight [n, k]: compute the weight's
                # gradient in the weight's own layout (g^T a) and hand back its
                # transpose, so the gradient autograd accumulates is contiguous and no
                # strided copy of every weight gradient runs after the backward.
                db = mm(g2.transpose(0, 1), a2, None, ctx.kernel, *db_slot).transpose(0, 1)
            else:
                db = mm(a2.transpose(0, 1), g2, None, ctx.kernel, *db_slot)
        else:
            db = _sum_to(mm(a.transpose(-1, -2), grad, None, ctx.kernel, *db_slot), b.shape)
    if want_dbias:
        dbias = col_sums(grad.reshape(-1, grad.shape[-1]), *extra(slots and slots.dbias))
    return da, db, dbias, None


def _column_sums_direct(g2: Tensor, slot: list | None = None) -> Tensor:
    """g2.sum(0): fp16/bf16 CUDA gradients on our column-sum kernel, the rest in torch.
    ``slot``: a routed case's (see :func:`_bridge.column_sums`).

    The 48 bias gradients of a GPT-2-small step (8192 tokens) on an H200 take
    0.50 ms on it, against 1.05 ms through torch's column reduction (both in
    benchmarks/results/gpt2_profile_NVIDIA_H200.json), 0.63 ms through cuBLASLt's
    BGRAD epilogue (gpt2_profile_bgrad_NVIDIA_H200.json: a reduction kernel of its
    own on Hopper, which also rounds its partial sums to the output type) and
    0.71 ms as ``ones @ g`` on our skinny GEMM (that profile file at commit b943d29).
    """
    if (
        g2.device.type == "cuda"
        and g2.dtype in _bridge.FLASH_DTYPES
        and g2.shape[0] > 1
        and not _bridge.cuda_kernels_unavailable()
    ):
        return _bridge.column_sums(g2, slot)
    return g2.sum(0)


@_bridge.custom_op("xpuruntime::column_sums", mutates_args=(), device_types="cpu")
def xrt_column_sums(x: Tensor) -> Tensor:
    """``x.sum(0)`` of a 2-D tensor (a linear layer's bias gradient); on CUDA with
    fp16/bf16 our deterministic column-sum kernel. CPU: torch's sum."""
    return x.sum(0)


@_bridge.cuda_kernel(xrt_column_sums)
def _(x):
    return _column_sums_direct(x)


@xrt_column_sums.register_fake
def _(x):
    return x.new_empty(x.shape[1])


def _backward(ctx, grad):
    return _grads(ctx, *ctx.saved_tensors, grad, xrt_matmul, xrt_column_sums)


xrt_matmul.register_autograd(_backward, setup_context=_setup_context)


# ---- eager fast path (see _bridge.eager_direct_ok) ------------------------------------------
class _DirectMatmul(torch.autograd.Function):
    """The CUDA kernels called directly, with the custom op's gradient formula."""

    @staticmethod
    def forward(ctx, a, b, bias, kernel, slots=None):  # type: ignore[override]
        _setup_context(ctx, (a, b, bias, kernel), None)
        ctx.slots = slots
        return _run_cuda(a, b, bias, kernel, slots.fwd if slots is not None else None)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        if torch.is_grad_enabled() or not _bridge.eager_direct_ok(grad, *ctx.saved_tensors):
            return (*_backward(ctx, grad), None)  # create_graph, or a mode that must see the op
        return (*_grads(ctx, *ctx.saved_tensors, grad, _run_cuda, _column_sums_direct, ctx.slots), None)


def matmul_forward(
    a: Tensor, b: Tensor, bias: Tensor | None, kernel: str, slots: CaseSlots | None = None
) -> Tensor:
    """``a @ b (+ bias)`` on ``kernel`` for a supported case, on the cheapest equivalent path.

    ``slots``: the routed case's (only a caller whose tensors routing checked against
    one case passes them; see :class:`CaseSlots`)."""
    if a.device.type == "cuda" and _bridge.eager_direct_ok(a, b, bias):
        grad = torch.is_grad_enabled() and (
            a.requires_grad or b.requires_grad or (bias is not None and bias.requires_grad)
        )
        if grad:
            return _DirectMatmul.apply(a, b, bias, kernel, slots)
        return _run_cuda(a, b, bias, kernel, slots.fwd if slots is not None else None)
    return xrt_matmul(a, b, bias, kernel)
