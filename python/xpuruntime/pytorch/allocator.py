"""Torch on our caching allocator (seed 002 §6.1): ``set_allocator`` / ``reset_allocator``.

:func:`set_allocator` hands torch the two C entry points ``xrt_torch_malloc`` and
``xrt_torch_free`` of the CUDA plugin through
``torch.cuda.memory.CUDAPluggableAllocator``: every CUDA tensor torch allocates
then comes from the core's per-device caching allocator, and
:func:`allocator_stats` reports our statistics. torch only swaps allocators
before it has allocated CUDA memory, so call :func:`set_allocator` first thing.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import _core
from .ops._bridge import cuda_kernels_unavailable

__all__ = ["allocator_enabled", "allocator_stats", "reset_allocator", "set_allocator"]

_MALLOC, _FREE = "xrt_torch_malloc", "xrt_torch_free"


class _AllocatorState:
    def __init__(self) -> None:
        self.original: Any = None
        self.ours: Any = None


_state = _AllocatorState()


def _plugin_path() -> str:
    if not torch.cuda.is_available():
        raise _core.BackendUnavailableError(
            "set_allocator: torch sees no CUDA device (nothing to allocate on)"
        )
    why = cuda_kernels_unavailable()
    if why:
        raise _core.BackendUnavailableError(f"set_allocator needs the CUDA plugin: {why}")
    # xrt_torch_malloc / xrt_torch_free live in their own library beside the plugin
    # (the plugin itself exports only its entry point).
    return _core.torch_allocator_library()


def allocator_enabled() -> bool:
    """True while torch allocates through xpuruntime."""
    return _state.ours is not None


def set_allocator(enabled: bool = True) -> None:
    """Puts torch's CUDA allocations on xpuruntime's caching allocator (or takes them off).

    Raises:
        XpuRuntimeError: torch already allocated CUDA memory with its own allocator
            (it cannot switch afterwards: call this before creating CUDA tensors).
        BackendUnavailableError: no CUDA plugin in this build or machine.
    """
    if not enabled:
        reset_allocator()
        return
    if _state.ours is not None:
        return
    path = _plugin_path()
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, _MALLOC, _FREE)
    original = torch.cuda.memory._get_current_allocator()
    try:
        torch.cuda.memory.change_current_allocator(alloc)
    except RuntimeError as e:
        raise _core.XpuRuntimeError(
            f"set_allocator: torch refused to switch allocators ({e}); call "
            "xpuruntime.pytorch.set_allocator() before any CUDA tensor is created"
        ) from None
    _state.original, _state.ours = original, alloc


def reset_allocator() -> None:
    """Gives torch back its own allocator and empties xpuruntime's cache.

    torch can switch back only while it has not allocated through ours; once it
    has, the process keeps our allocator and this raises XpuRuntimeError (after
    emptying the cache) saying so.
    """
    if _state.ours is None:
        return
    for i in range(torch.cuda.device_count()):
        _core.memory.empty_cache(f"cuda:{i}")
    try:
        torch.cuda.memory.change_current_allocator(_state.original)
    except RuntimeError as e:
        raise _core.XpuRuntimeError(
            "reset_allocator: torch has already allocated CUDA memory through xpuruntime's "
            f"allocator and cannot switch back in this process ({e}); the cache was emptied"
        ) from None
    _state.ours = _state.original = None


def allocator_stats(device: int | str | torch.device | None = None) -> Any:
    """Our allocator's statistics (allocated, reserved, peaks, counts) for a CUDA device."""
    if device is None:
        device = torch.cuda.current_device()
    if isinstance(device, int):
        device = f"cuda:{device}"
    return _core.memory.stats(str(device))
