"""Tensors and streams as the NCCL helper sees them, validated before any NCCL call.

A tensor is an ``xpuruntime.Tensor``, a ``torch.Tensor`` or anything with
``__dlpack__`` (wrapped zero-copy by ``xpuruntime.from_dlpack``). It must be a
contiguous CUDA tensor of a dtype NCCL reduces. Every refusal is an
``InvalidArgumentError`` saying what, where and how to fix it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from .. import _core
from .._core import InvalidArgumentError

# dtype name -> ncclDataType_t (nccl.h; tests/python/test_distributed.py checks these
# against the header).
NCCL_DTYPES: dict[str, int] = {
    "int8": 0,
    "uint8": 1,
    "int32": 2,
    "int64": 4,
    "float16": 6,
    "float32": 7,
    "float64": 8,
    "bfloat16": 9,
}
# op name -> ncclRedOp_t.
NCCL_OPS: dict[str, int] = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}


@dataclass(frozen=True)
class TensorInfo:
    """What a collective needs of one tensor (``obj`` keeps the memory alive)."""

    obj: Any
    ptr: int
    numel: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    device_type: str  # "cuda", "cpu", ...
    device: int  # device index
    is_torch: bool


def _is_torch(t: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(t, torch.Tensor)


def describe(t: Any, name: str, where: str) -> TensorInfo:
    """Validates ``t`` (argument ``name`` of ``where``) and returns its TensorInfo.

    Raises:
        InvalidArgumentError: not a tensor, not contiguous, or a dtype NCCL does not
            reduce (placement is checked by :func:`require_cuda`, after the arguments'
            sizes agree).
    """
    if _is_torch(t):
        dtype = str(t.dtype).replace("torch.", "")
        device_type, index = t.device.type, t.device.index
        contiguous, ptr, shape = t.is_contiguous(), t.data_ptr(), tuple(t.shape)
        numel, itemsize, is_torch = t.numel(), t.element_size(), True
    else:
        if not isinstance(t, _core.Tensor):
            if not hasattr(t, "__dlpack__"):
                raise InvalidArgumentError(
                    f"{where}: {name} is a {type(t).__name__}, not a tensor; pass an xpuruntime.Tensor, "
                    "a torch.Tensor or any CUDA tensor with __dlpack__"
                )
            t = _core.from_dlpack(t)
        dtype = t.dtype
        device_type, _, idx = t.device.partition(":")
        index = int(idx) if idx else 0
        contiguous, ptr, shape = t.is_contiguous(), t.data_ptr, tuple(t.shape)
        numel, itemsize, is_torch = t.numel, t.itemsize, False
    if dtype not in NCCL_DTYPES:
        raise InvalidArgumentError(
            f"{where}: {name} has dtype {dtype}, which NCCL collectives here do not take; use one of "
            f"{', '.join(NCCL_DTYPES)} (cast first, e.g. bool -> uint8)"
        )
    if not contiguous:
        raise InvalidArgumentError(
            f"{where}: {name} (shape {list(shape)}) is not contiguous; NCCL reads one dense buffer: "
            "pass t.contiguous() (and copy results back if it was a view)"
        )
    nbytes = int(numel) * int(itemsize)
    return TensorInfo(t, int(ptr), int(numel), nbytes, dtype, shape, device_type, int(index or 0), is_torch)


def require_cuda(info: TensorInfo, name: str, where: str, device: int) -> None:
    """Raises unless the tensor lives on ``cuda:<device>`` (the communicator's GPU)."""
    if info.device_type != "cuda":
        raise InvalidArgumentError(
            f"{where}: {name} is a {info.device_type} tensor (shape {list(info.shape)}); NCCL moves CUDA "
            f"memory only: move it to the communicator's GPU first (t.to('cuda:{device}'))"
        )
    if info.device != device:
        raise InvalidArgumentError(
            f"{where}: {name} is on cuda:{info.device} but the communicator uses cuda:{device}; "
            f"move the tensor to cuda:{device}"
        )


def same_kind(a: TensorInfo, b: TensorInfo, where: str, names: tuple[str, str]) -> None:
    """Raises unless ``a`` and ``b`` share dtype and device."""
    if a.dtype != b.dtype:
        raise InvalidArgumentError(
            f"{where}: {names[0]} is {a.dtype} but {names[1]} is {b.dtype}; both must have one dtype"
        )
    if a.device != b.device:
        raise InvalidArgumentError(
            f"{where}: {names[0]} is on cuda:{a.device} but {names[1]} on cuda:{b.device}; both must be on "
            "the communicator's device"
        )


def op_code(op: str, where: str) -> int:
    """The ncclRedOp_t of a reduction name; InvalidArgumentError naming the choices."""
    if not isinstance(op, str) or op.lower() not in NCCL_OPS:
        raise InvalidArgumentError(
            f"{where}: op={op!r} is not a reduction; use one of {', '.join(repr(k) for k in NCCL_OPS)}"
        )
    return NCCL_OPS[op.lower()]


def stream_handle(stream: Any, first: TensorInfo) -> int:
    """The CUstream to enqueue on: an int handle, an ``xpuruntime.Stream``, a
    ``torch.cuda.Stream``; None = torch's current stream for torch tensors, else
    xpuruntime's current stream on the tensor's device."""
    if stream is None:
        if first.is_torch:
            import torch

            return int(torch.cuda.current_stream(first.device).cuda_stream)
        return int(_core.streams.current_stream(f"cuda:{first.device}").handle)
    if isinstance(stream, bool):
        raise InvalidArgumentError(
            f"stream={stream!r} is not a stream; pass a stream object, a handle or None"
        )
    if isinstance(stream, int):
        return stream
    if isinstance(stream, _core.Stream):
        return int(stream.handle)
    if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream / ExternalStream
        return int(stream.cuda_stream)
    raise InvalidArgumentError(
        f"stream={type(stream).__name__} is not a stream; pass an xpuruntime.Stream, a torch.cuda.Stream, "
        "an integer cudaStream_t or None (the current stream)"
    )
