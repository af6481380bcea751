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

import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ... import _core

__all__ = [
    "available",
    "check",
    "clear",
    "prepared",
    "run",
    "spec",
    "strides",
    "workspace",
    "workspace_tensor",
]

_routed = getattr(_core, "routed", None)

#: case key -> _core.routed.PreparedCall
_calls: dict[tuple, Any] = {}
#: (device index, raw stream) -> (uint8 workspace tensor, its pointer, its bytes)
_workspaces: dict[tuple[int, int], tuple[torch.Tensor, int, int]] = {}
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


#: Checking mode (the tests turn it on; ``XRT_ROUTED_CHECK=1`` in the environment): every
#: run first verifies its tensors against the prepared case (:func:`check`), so a case
#: reused for tensors it does not describe fails with a typed error instead of a kernel
#: reading or writing out of bounds. Off by default: it costs host time per call.
CHECK = os.environ.get("XRT_ROUTED_CHECK", "") == "1"


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
    return _workspace_entry(device, index, stream, nbytes)[0]


def _workspace_entry(
    device: torch.device, index: int, stream: int, nbytes: int
) -> tuple[torch.Tensor, int, int]:
    key = (index, stream)
    ws = _workspaces.get(key)
    if ws is None or ws[2] < nbytes:
        if ws is None and len(_workspaces) >= MAX_WORKSPACES:  # streams come and go: the oldest goes
            del _workspaces[next(iter(_workspaces))]
        t = torch.empty(nbytes, dtype=torch.uint8, device=device)
        ws = _workspaces[key] = (t, t.data_ptr(), nbytes)
    return ws


def workspace(device: torch.device, index: int, stream: int, nbytes: int) -> tuple[int, int]:
    """(pointer, bytes) of :func:`workspace_tensor`; (0, 0) when ``nbytes`` is 0.

    A hit is one dictionary lookup: the pointer and size are kept beside the tensor."""
    if nbytes == 0:
        return 0, 0
    ws = _workspaces.get((index, stream))
    if ws is None or ws[2] < nbytes:
        ws = _workspace_entry(device, index, stream, nbytes)
    return ws[1], ws[2]


def run(
    call: Any,
    inputs: Sequence[torch.Tensor | None],
    outputs: Sequence[torch.Tensor],
    device: torch.device,
    index: int,
    stream: int,
) -> None:
    """Runs a PreparedCall on the tensors' pointers (None or an empty tensor: 0) on ``stream``."""
    if CHECK:
        check(call, inputs, outputs)
    ws, nbytes = workspace(device, index, stream, call.workspace_bytes)
    call.run(
        [0 if t is None else t.data_ptr() for t in inputs],
        [t.data_ptr() for t in outputs],
        stream,
        ws,
        nbytes,
    )


def check(call: Any, inputs: Sequence[torch.Tensor | None], outputs: Sequence[torch.Tensor]) -> None:
    """Raises InvalidArgumentError unless each tensor fits its operand of the prepared case:
    the case's dtype, and at least the bytes the case's view spans from the tensor's
    pointer within the memory the tensor owns (what the kernel will read or write)."""
    ctx = call.context
    for role, tensors, specs, extents in (
        ("input", inputs, ctx.inputs, call.input_extents),
        ("output", outputs, ctx.outputs, call.output_extents),
    ):
        if len(tensors) != len(specs):
            raise _core.InvalidArgumentError(
                f"routed {ctx.op} ({call.kernel}): the case has {len(specs)} {role}s, "
                f"the call passed {len(tensors)}"
            )
        for i, (t, s, need) in enumerate(zip(tensors, specs, extents)):
            where = f"routed {ctx.op} ({call.kernel}), {role} {i} {s!r}"
            if t is None or t.numel() == 0:
                if need:
                    raise _core.InvalidArgumentError(f"{where}: no tensor for a non-empty operand")
                continue
            if DTYPE_NAMES.get(t.dtype) != s.dtype:
                raise _core.InvalidArgumentError(f"{where}: the tensor is {t.dtype}")
            st = t.untyped_storage()
            owned = st.data_ptr() + st.nbytes() - t.data_ptr()
            if need > owned:
                raise _core.InvalidArgumentError(
                    f"{where}: the case's view spans {need} bytes from the pointer, the tensor "
                    f"{tuple(t.shape)} strides {t.stride()} owns {owned}: a prepared case was "
                    "reused for tensors it does not describe (its key misses a shape or stride)"
                )


def clear() -> None:
    """Forgets the prepared calls and workspaces (tests; a registry change)."""
    _calls.clear()
    _workspaces.clear()
