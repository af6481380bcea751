"""Registry kernels on torch tensors: one prepared call per case, run on raw pointers.

The eager hot path of a routed call (DESIGN.md §8): the kernel the Dispatcher chose is
the C++ registry's own (the one inference plans run), bound once per case
(``_core.routed.PreparedCall``: found, checked against the case, workspace sized) and
then run on the tensors' data pointers, with the case's shapes and strides, on torch's
current stream. Per call that is one dictionary lookup, the pointers and one call into
C++ that releases the GIL: no DLPack capsule, no stream object, no event, no
synchronization. Outputs and workspaces come from torch's caching allocator (a
workspace is kept per device and stream, as torch keeps cuBLAS's), so CUDA graph
capture sees only torch allocations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ... import _core

__all__ = ["available", "clear", "prepared", "run", "spec", "strides", "workspace", "workspace_tensor"]

_routed = getattr(_core, "routed", None)

#: case key -> _core.routed.PreparedCall
_calls: dict[tuple, Any] = {}
#: (device index, raw stream) -> uint8 workspace tensor
_workspaces: dict[tuple[int, int], torch.Tensor] = {}
#: Workspaces kept at most (one per stream that ran our kernels; capture_graph makes streams).
MAX_WORKSPACES = 8
#: torch dtype -> the core's dtype name
DTYPE_NAMES = {
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float32: "float32",
    torch.float64: "float64",
    torch.bool: "bool",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.uint8: "uint8",
}


def available() -> bool:
    """True when this ``_core`` runs registry kernels on raw pointers (``_core.routed``)."""
    return _routed is not None


def strides(t: torch.Tensor) -> tuple[int, ...]:
    """``t``'s element strides, a size-1 dimension's replaced by its contiguous value.

    A size-1 dimension is never stepped over, so its stride does not change which
    memory the view reads; torch leaves arbitrary values there, which BLAS layout
    checks (leading dimension >= rows) would refuse for no reason.
    """
    shape, st = t.shape, t.stride()
    if 1 not in shape:
        return st
    out = list(st)
    extent = 1  # elements spanned by the dimensions to the right
    for i in range(len(shape) - 1, -1, -1):
        if shape[i] == 1:
            out[i] = extent
        else:
            extent = max(extent, shape[i] * st[i])
    return tuple(out)


def spec(t: torch.Tensor) -> tuple[str, list[int], list[int]]:
    """(dtype name, shape, strides) of ``t`` for an OpContext."""
    return (DTYPE_NAMES[t.dtype], list(t.shape), list(strides(t)))


def prepared(key: tuple, kernel: str, make_context: Callable[[], Any]) -> Any:
    """The case's PreparedCall (made on the first call of the case: UnsupportedOperationError
    when the registry kernel cannot run it)."""
    call = _calls.get(key)
    if call is None:
        call = _calls[key] = _routed.PreparedCall(kernel, make_context())
    return call


def workspace_tensor(device: torch.device, index: int, stream: int, nbytes: int) -> torch.Tensor:
    """A uint8 workspace of at least ``nbytes`` (> 0) for work on ``stream``.

    One per device and stream, from torch's caching allocator, kept for later calls:
    work on one stream runs in order, so the calls on it share it (what torch does with
    cuBLAS's workspace). One taken while a CUDA graph is captured comes from the graph's
    pool and is what its replays use: graphs captured on one stream share it, so they
    must not be replayed concurrently on different streams (as with torch's own cuBLAS
    workspace).
    """
    key = (index, stream)
    ws = _workspaces.get(key)
    if ws is None or ws.numel() < nbytes:
        if ws is None and len(_workspaces) >= MAX_WORKSPACES:  # streams come and go: the oldest goes
            del _workspaces[next(iter(_workspaces))]
        ws = _workspaces[key] = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return ws


def workspace(device: torch.device, index: int, stream: int, nbytes: int) -> tuple[int, int]:
    """(pointer, bytes) of :func:`workspace_tensor`; (0, 0) when ``nbytes`` is 0."""
    if nbytes == 0:
        return 0, 0
    ws = workspace_tensor(device, index, stream, nbytes)
    return ws.data_ptr(), ws.numel()


def run(
    call: Any,
    inputs: Sequence[torch.Tensor | None],
    outputs: Sequence[torch.Tensor],
    device: torch.device,
    index: int,
    stream: int,
) -> None:
    """Runs a PreparedCall on the tensors' pointers (None or an empty tensor: 0) on ``stream``."""
    ws, nbytes = workspace(device, index, stream, call.workspace_bytes)
    call.run(
        tuple(0 if t is None else t.data_ptr() for t in inputs),
        tuple(t.data_ptr() for t in outputs),
        stream,
        ws,
        nbytes,
    )


def clear() -> None:
    """Forgets the prepared calls and workspaces (tests; a registry change)."""
    _calls.clear()
    _workspaces.clear()
