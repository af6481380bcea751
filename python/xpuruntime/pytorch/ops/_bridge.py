"""The seam between torch tensors and our CUDA kernels in ``_core.cuda_kernels``.

Our kernels take raw device pointers, element strides and the current torch
stream as integers (DESIGN.md §8), so ``_core`` never links torch. This module
prepares tensors (dtype, contiguous last dimension, 16-byte aligned rows), says
why a case cannot run (:func:`cuda_kernels_unavailable`) and makes the calls.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

from ... import _core
from . import _launch

FLASH_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
LN_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
#: The plugin's kernels are built for sm_90 (machine code plus PTX for newer GPUs).
MIN_CAPABILITY = (9, 0)


def custom_op(name: str, contiguous_inputs: bool = True, **kwargs) -> Callable:
    """``torch.library.custom_op``, by default asking torch.compile for contiguous inputs.

    Our kernels and reference implementations return contiguous outputs; with the
    ``needs_contiguous_strides`` tag (where this torch has it) inductor also hands
    the ops contiguous inputs, so the layouts it traced are the ones that run.
    ``contiguous_inputs=False`` (ops whose CUDA implementations take any layout,
    copying only what their kernels cannot read, and whose outputs are contiguous
    whatever the inputs: linear, attention) leaves the tag off, so inductor does not
    copy a strided input (attention's q/k/v split from one projection and transposed,
    say) before every call.
    """
    if (
        contiguous_inputs
        and "tags" in inspect.signature(torch.library.custom_op).parameters
        and hasattr(torch.Tag, "needs_contiguous_strides")
    ):
        kwargs["tags"] = (torch.Tag.needs_contiguous_strides,)
    return torch.library.custom_op(name, **kwargs)


#: namespace -> the Library our CUDA kernels are registered through (kept alive: dropping
#: a Library deregisters its kernels)
_kernel_libs: dict[str, torch.library.Library] = {}


def cuda_kernel(op: Any, dispatch_key: str = "CUDA") -> Callable:
    """Decorator: ``fn`` becomes custom op ``op``'s kernel for ``dispatch_key`` (CUDA),
    registered with the dispatcher directly (``torch.library.Library.impl``).

    ``op.register_kernel("cuda")`` would put three Python layers between the dispatcher
    and ``fn`` on every call (its backend wrapper, a dynamo-disabling wrapper, the check
    that no output aliases an input): 6.9 against 3.7 µs a call of a no-op op on this
    CPU, under ``torch.no_grad`` as a compiled graph runs our ops, about a
    hundred and seventy calls a GPT-2-small step. Our kernels return fresh tensors (no
    output aliases an input) and run only on real tensors (dynamo traces the fake
    implementations), so the layers check nothing here. The schema, the fake
    implementation, the autograd formula and the CPU reference stay the custom op's.
    """
    ns, name = op._namespace, op._name

    def register(fn: Callable) -> Callable:
        lib = _kernel_libs.get(ns)
        if lib is None:
            lib = _kernel_libs[ns] = torch.library.Library(ns, "IMPL")
        lib.impl(name, fn, dispatch_key)
        return fn

    return register


# ---- eager fast path ------------------------------------------------------------------------
# A torch.library custom op costs tens of microseconds of host time per call
# (dispatcher, autograd wrapper, a Python kernel): as much as the whole kernel of a
# GPT-2-sized LayerNorm or GEMM. In plain eager mode nothing needs the dispatcher, so
# the ops call our kernels directly (through an autograd.Function when a gradient is
# needed). torch.compile, dispatch modes (fake tensors, tracing, FlopCounter) and
# tensor subclasses keep the custom ops, which is what they understand.
_dispatch_depth = getattr(torch._C, "_len_torch_dispatch_stack", None)
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", None)


# nn.Parameter disables __torch_function__ (it behaves as a plain tensor), and module
# weights reach the kernels as Parameters whenever no autocast cast replaced them.
_PLAIN_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)


def eager_direct_ok(*tensors: torch.Tensor | None) -> bool:
    """True when calling the CUDA kernels directly is indistinguishable from the custom op.

    (functorch transforms wrap tensors in ones whose Python type is still Tensor,
    hence the explicit check.)
    """
    if _dispatch_depth is None or _functorch_active is None:
        return False
    # is_compiling() first: Dynamo folds it to True while tracing, and cannot trace the
    # dispatch-stack query (a torch op returning an int: a graph break under fullgraph).
    if torch.compiler.is_compiling():
        return False
    if _dispatch_depth() != 0 or _functorch_active():
        return False
    if torch._C._get_tracing_state() is not None:  # torch.jit.trace records only the custom op
        return False
    return all(t is None or type(t) in _PLAIN_TENSOR_TYPES for t in tensors)


@functools.cache
def cuda_kernels_unavailable() -> str:
    """Why our CUDA kernels cannot run in this process ("" when they can)."""
    return str(_core.cuda_kernels.unavailable_reason())


@functools.cache
def capability(device_index: int) -> int:
    """Compute capability of CUDA device ``device_index`` as major * 10 + minor (90 = Hopper)."""
    major, minor = torch.cuda.get_device_capability(device_index)
    return major * 10 + minor


@functools.cache
def capability_problem(device_index: int) -> str:
    """Why device ``device_index`` cannot run our kernels ("" when it can)."""
    cap = torch.cuda.get_device_capability(device_index)
    if cap < MIN_CAPABILITY:
        return (
            f"compute capability {cap[0]}.{cap[1]} < {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} "
            "(the kernels are built for sm_90)"
        )
    return ""


def registry_verdict(op: str, kernel: str, ctx: object) -> tuple[str, str] | None:
    """Why the registry's ``kernel`` for ``op`` cannot run the case ``ctx`` (an OpContext):
    ``(reason_code, detail)``, or None when it can. The C++ KernelDef and its supports()
    answer (the checks the Dispatcher makes), so no Python copy of them can drift."""
    _core.DeviceManager.instance().get_device_count()  # loads the device plugins (once)
    try:
        ok, code, detail = _core.KernelRegistry.instance().check(op, kernel, ctx)
    except _core.InvalidArgumentError:  # no such kernel registered in this process
        why = cuda_kernels_unavailable() or f"no '{kernel}' kernel for op '{op}' is registered"
        return _core.reason.BACKEND_UNAVAILABLE, why
    if not ok and code == _core.reason.DEVICE_MISMATCH and cuda_kernels_unavailable():
        return _core.reason.BACKEND_UNAVAILABLE, f"{detail}: {cuda_kernels_unavailable()}"
    return None if ok else (str(code), str(detail))


#: case -> the registry's verdict (support checks of the direct APIs, per call)
_verdicts: dict[tuple, tuple[str, str] | None] = {}


def tensor_case(t: torch.Tensor | None) -> tuple | None:
    """What a support verdict depends on of one tensor: dtype, shape, strides, device."""
    return None if t is None else (t.dtype, tuple(t.shape), t.stride(), t.device)


def cached_verdict(
    case: tuple, op: str, kernel: str, make_context: Callable[[], object]
) -> tuple[str, str] | None:
    """:func:`registry_verdict` of a case, asked once (the OpContext is built on a miss only)."""
    try:
        return _verdicts[case]
    except KeyError:
        pass
    if len(_verdicts) >= 4096:
        _verdicts.clear()
    v = _verdicts[case] = registry_verdict(op, kernel, make_context())
    return v


def rows_aligned(t: torch.Tensor) -> torch.Tensor:
    """``t`` with a contiguous last dimension and 16-byte aligned rows and base (a copy when needed)."""
    st = t.stride()
    if st[-1] != 1 or t.data_ptr() % 16:
        return t.contiguous()
    esize, shape = t.element_size(), t.shape
    for i in range(len(st) - 1):
        if shape[i] > 1 and (st[i] * esize) % 16:
            return t.contiguous()
    return t


def strides3(t: torch.Tensor) -> tuple[int, int, int]:
    """Element strides of dims 0..2 of a 4-D tensor; size-1 dims (never stepped over) get 0."""
    s, n = t.stride(), t.shape
    return (s[0] if n[0] > 1 else 0, s[1] if n[1] > 1 else 0, s[2] if n[2] > 1 else 0)


def mask_args(
    mask: torch.Tensor | None, shape4: tuple[int, int, int, int]
) -> tuple[str, torch.Tensor | None, tuple[int, int, int, int]]:
    """(kind, tensor to keep alive, element strides of the broadcast view) for the kernels."""
    if mask is None:
        return "none", None, (0, 0, 0, 0)
    m = mask if mask.dtype == torch.bool else mask.to(torch.float32)
    while m.dim() < 4:
        m = m.unsqueeze(0)
    view = m.expand(*shape4)
    s = view.stride()
    return ("bool" if m.dtype == torch.bool else "additive"), m, (s[0], s[1], s[2], s[3])


# torch's own accessor of the current raw stream (what inductor's generated code
# calls); ~10x cheaper than building a torch.cuda.Stream. Absent on CPU-only builds.
_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def raw_stream(index: int) -> int:
    """The current torch stream of CUDA device ``index`` as an integer handle."""
    if _current_raw_stream is not None:
        return int(_current_raw_stream(index))
    return int(torch.cuda.current_stream(index).cuda_stream)


def _bshd_like(t: torch.Tensor) -> bool:
    """True when ``t`` ([B, H, S, D]) is laid out sequence-major, heads inside a
    position ([B, S, H, D] memory transposed, as models split a fused QKV projection)."""
    return t.shape[1] > 1 and t.shape[2] > 1 and t.stride(1) < t.stride(2)


def _empty_bhsd(B: int, H: int, S: int, D: int, like: torch.Tensor, bshd: bool) -> torch.Tensor:
    """An uninitialised [B, H, S, D] tensor, stored [B, S, H, D] when ``bshd``."""
    if bshd:
        return like.new_empty((B, S, H, D)).transpose(1, 2)
    return like.new_empty((B, H, S, D))


def flash_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    dropout_p: float,
    causal: bool,
    scale: float,
    rng_state: torch.Tensor | None,
    layout_like_inputs: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Runs our FlashAttention-2 forward on 4-D CUDA tensors ``[B, H, S, D]``.

    ``layout_like_inputs``: when q is stored sequence-major ([B, S, H, D] memory),
    store the output the same way, so the usual ``out.transpose(1, 2).reshape(B, S,
    H * D)`` that follows is a view instead of a copy (the eager path; the custom op
    keeps the contiguous layout its fake implementation promises).
    """
    index = q.device.index
    if index != _current_device():
        with torch.cuda.device(index):
            return flash_forward(q, k, v, mask, dropout_p, causal, scale, rng_state, layout_like_inputs)
    q, k, v = rows_aligned(q), rows_aligned(k), rows_aligned(v)
    B, Hq, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    out = _empty_bhsd(B, Hq, Sq, D, q, layout_like_inputs and _bshd_like(q))
    lse = q.new_empty((B, Hq, Sq), dtype=torch.float32)
    kind, m, mstride = mask_args(mask, (B, Hq, Sq, Sk))
    _core.cuda_kernels.flash_attention_forward(
        dtype=FLASH_DTYPES[q.dtype],
        shape=(B, Hq, Hkv, Sq, Sk, D),
        q=q.data_ptr(),
        k=k.data_ptr(),
        v=v.data_ptr(),
        out=out.data_ptr(),
        lse=lse.data_ptr(),
        q_stride=strides3(q),
        k_stride=strides3(k),
        v_stride=strides3(v),
        out_stride=strides3(out),
        scale=float(scale),
        causal=bool(causal),
        mask_kind=kind,
        mask=m.data_ptr() if m is not None else 0,
        mask_stride=mstride,
        dropout_p=float(dropout_p),
        rng_state=rng_state.data_ptr() if rng_state is not None else 0,
        stream=raw_stream(index),
    )
    return out, lse


def flash_backward(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    mask: torch.Tensor | None,
    dropout_p: float,
    causal: bool,
    scale: float,
    rng_state: torch.Tensor | None,
    layout_like_inputs: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Runs our FlashAttention-2 backward; returns (dq, dk, dv) shaped like q, k, v.

    ``layout_like_inputs``: each gradient stored sequence-major when its input is
    (see :func:`flash_forward`), so autograd's transposes back are views.
    """
    index = q.device.index
    if index != _current_device():
        with torch.cuda.device(index):
            return flash_backward(
                dout, q, k, v, out, lse, mask, dropout_p, causal, scale, rng_state, layout_like_inputs
            )
    q, k, v, out, dout = (rows_aligned(t) for t in (q, k, v, out, dout))
    lse = lse.contiguous()
    B, Hq, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    dev, dt = q.device, q.dtype
    like = layout_like_inputs and Hq == Hkv  # GQA sums per-query-head buffers: contiguous
    dq = _empty_bhsd(B, Hq, Sq, D, q, layout_like_inputs and _bshd_like(q))
    dk = _empty_bhsd(B, Hq, Sk, D, q, like and _bshd_like(k))
    dv = _empty_bhsd(B, Hq, Sk, D, q, like and _bshd_like(v))
    # dq_accum (fp32 [B, Hq, Sq, D], zeroed by the kernel) and dsum (fp32 [B, Hq, Sq],
    # written by it) are scratch of this launch only: the stream's kept workspace
    # (_launch.workspace, as cuBLAS's and LayerNorm's), not two allocations per call.
    stream = raw_stream(index)
    rows = B * Hq * Sq
    dsum_at = (rows * D * 4 + 255) // 256 * 256
    ws, _ = _launch.workspace(dev, index, stream, dsum_at + rows * 4 if rows else 0)
    kind, m, mstride = mask_args(mask, (B, Hq, Sq, Sk))
    _core.cuda_kernels.flash_attention_backward(
        dtype=FLASH_DTYPES[dt],
        shape=(B, Hq, Hkv, Sq, Sk, D),
        q=q.data_ptr(),
        k=k.data_ptr(),
        v=v.data_ptr(),
        out=out.data_ptr(),
        dout=dout.data_ptr(),
        lse=lse.data_ptr(),
        dq=dq.data_ptr(),
        dk=dk.data_ptr(),
        dv=dv.data_ptr(),
        dq_accum=ws,
        dsum=ws + dsum_at if ws else 0,
        q_stride=strides3(q),
        k_stride=strides3(k),
        v_stride=strides3(v),
        out_stride=strides3(out),
        dout_stride=strides3(dout),
        dq_stride=strides3(dq),
        dk_stride=strides3(dk),
        dv_stride=strides3(dv),
        scale=float(scale),
        causal=bool(causal),
        mask_kind=kind,
        mask=m.data_ptr() if m is not None else 0,
        mask_stride=mstride,
        dropout_p=float(dropout_p),
        rng_state=rng_state.data_ptr() if rng_state is not None else 0,
        stream=stream,
    )
    if Hq != Hkv:  # grouped-query attention: each kv head collects its query heads
        g = Hq // Hkv
        dk = dk.view(B, Hkv, g, Sk, D).sum(2)
        dv = dv.view(B, Hkv, g, Sk, D).sum(2)
    return dq, dk, dv


_current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def column_sums(x: torch.Tensor, slot: list | None = None) -> torch.Tensor:
    """``x.sum(0)`` of a 2-D fp16/bf16 CUDA tensor on our kernel.

    fp32 accumulation, one rounding to x's dtype, deterministic (the row split
    depends only on the shape). A linear layer's bias gradient (figures against
    the alternatives: pytorch/ops/matmul.py, _column_sums_direct): the registry's
    ``column_sums`` kernel on the tensors' pointers (:mod:`._launch`). The kernel
    launches on the current device, so ``x``'s device is made current.

    ``slot`` (a one-element list) belongs to a routed call's case whose ``x`` always has
    one shape and layout: the prepared call of an ``x`` used as it comes is kept there
    and the case's later calls skip the checks and the key.
    """
    if slot is not None:
        hit = slot[0]
        if hit is not None and hit[1] == _current_device():
            return _run_column_sums(hit[0], x, hit[1])
    index = x.device.index
    if index != _current_device():
        with torch.cuda.device(index):
            return column_sums(x)
    rows, cols = x.shape
    direct = True
    if x.stride(1) != 1 or (rows > 1 and x.stride(0) < cols):
        x = x.contiguous()
        direct = False
    key = ("column_sums", x.dtype, index, x.shape, _launch.strides(x))
    call = _launch._calls.get(key)
    if call is None:
        call = _launch.prepared(
            key,
            "column_sums",
            lambda: _core.OpContext(
                "column_sums",
                [_launch.spec(x)],
                [(_launch.DTYPE_NAMES[x.dtype], [cols], [1])],
                device=f"cuda:{index}",
                capability=capability(index),
                node="column_sums",
            ),
        )
    if slot is not None and direct:
        slot[0] = (call, index)
    return _run_column_sums(call, x, index)


def _run_column_sums(call: object, x: torch.Tensor, index: int) -> torch.Tensor:
    return run_column_sums(call, x, x.shape[1], index)


def run_column_sums(call: object, x: torch.Tensor, cols: int, index: int) -> torch.Tensor:
    """Runs a prepared column-sum case on ``x``'s pointer (its rows x ``cols`` as the case
    describes them; any leading shape of a contiguous ``x``); returns the ``cols`` sums."""
    out = x.new_empty(cols)
    _launch.run(call, (x,), (out,), x.device, index, raw_stream(index))
    return out


def layernorm_forward(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    cols: int,
    eps: float,
    with_stats: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Fused LayerNorm forward over the last ``cols`` elements; returns (y, mean, rstd).

    ``with_stats=False`` (no backward will follow) neither allocates nor writes
    mean and rstd, and returns None for them.

    This is on every forward call, so it avoids what costs host time there (the
    kernel of a GPT-2 sized layer runs for a few microseconds): a ``torch.cuda.device``
    context only when ``x`` is not on the current device and the raw stream handle
    instead of a ``Stream`` object. (mean and rstd stay separate allocations: custom
    op outputs must not alias each other.)
    """
    index = x.device.index
    if index != _current_device():
        with torch.cuda.device(index):
            return layernorm_forward(x, weight, bias, cols, eps, with_stats)
    x = x.contiguous()
    rows = x.numel() // cols
    y = torch.empty_like(x)
    mean = rstd = None
    if with_stats:
        mean = x.new_empty(rows, dtype=torch.float32)
        rstd = x.new_empty(rows, dtype=torch.float32)
    w = weight.contiguous() if weight is not None else None
    b = bias.contiguous() if bias is not None else None
    _core.cuda_kernels.layernorm_forward(
        dtype=LN_DTYPES[x.dtype],
        rows=rows,
        cols=cols,
        x=x.data_ptr(),
        weight=w.data_ptr() if w is not None else 0,
        bias=b.data_ptr() if b is not None else 0,
        y=y.data_ptr(),
        mean=mean.data_ptr() if mean is not None else 0,
        rstd=rstd.data_ptr() if rstd is not None else 0,
        eps=float(eps),
        stream=raw_stream(index),
    )
    return y, mean, rstd


def layernorm_backward(
    dy: torch.Tensor,
    x: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor | None,
    cols: int,
    want_dweight: bool,
    want_dbias: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Fused LayerNorm backward; returns (dx, dweight or None, dbias or None)."""
    index = x.device.index
    if index != _current_device():
        with torch.cuda.device(index):
            return layernorm_backward(dy, x, mean, rstd, weight, cols, want_dweight, want_dbias)
    x, dy = x.contiguous(), dy.contiguous()
    rows = x.numel() // cols
    dx = torch.empty_like(x)
    dw = x.new_empty(cols) if want_dweight else None
    db = x.new_empty(cols) if want_dbias else None
    w = weight.contiguous() if weight is not None else None
    key = (x.dtype, rows, cols, index)
    need = _ln_workspace_bytes.get(key)
    if need is None:  # sized without pointers (aligned: the larger plan), so it fits every call
        need = _ln_workspace_bytes[key] = max(
            int(
                _core.cuda_kernels.layernorm_backward_workspace_bytes(
                    dtype=LN_DTYPES[x.dtype], rows=rows, cols=cols
                )
            ),
            16,
        )
    stream = raw_stream(index)
    # the stream's workspace (torch's allocator, kept per stream: _launch.workspace)
    ws, ws_bytes = _launch.workspace(x.device, index, stream, need)
    _core.cuda_kernels.layernorm_backward(
        dtype=LN_DTYPES[x.dtype],
        rows=rows,
        cols=cols,
        dy=dy.data_ptr(),
        x=x.data_ptr(),
        mean=mean.data_ptr(),
        rstd=rstd.data_ptr(),
        weight=w.data_ptr() if w is not None else 0,
        dx=dx.data_ptr(),
        dweight=dw.data_ptr() if dw is not None else 0,
        dbias=db.data_ptr() if db is not None else 0,
        workspace=ws,
        workspace_bytes=ws_bytes,
        stream=stream,
    )
    return dx, dw, db


#: (dtype, rows, cols, device index) -> bytes of workspace layernorm_backward needs
_ln_workspace_bytes: dict[tuple, int] = {}
