"""The caching allocator per device and pinned host memory (seed 001 §2.2)."""

from __future__ import annotations

from .. import _core

_mem = _core.memory
MemoryStats = _core.MemoryStats


def memory_stats(device: str = "cpu") -> _core.MemoryStats:
    """Allocator statistics: allocated, reserved, peak, counts, cache hits, limit."""
    return _mem.stats(str(device))


def empty_cache(device: str = "cpu") -> None:
    """Return every cached (unused) block of ``device`` to the system."""
    _mem.empty_cache(str(device))


def reset_peak_stats(device: str = "cpu") -> None:
    _mem.reset_peak_stats(str(device))


def set_memory_limit(device: str, limit_bytes: int) -> None:
    """Cap the bytes ``device``'s allocator may reserve (0 removes the cap).

    Past the cap an allocation raises :class:`xpuruntime.OutOfMemoryError` with the
    statistics in its message; the allocator stays usable afterwards.
    """
    _mem.set_memory_limit(str(device), int(limit_bytes))


def raw_alloc(nbytes: int, device: str = "cpu", stream: int | None = None) -> int:
    """Allocate a raw block (returns its address); free it with :func:`raw_free`."""
    return _mem.raw_alloc(int(nbytes), str(device), stream)


def _address(ptr: int) -> int:
    """``ptr`` as an address (InvalidArgumentError for what cannot be one: negative, > 64 bits)."""
    import operator

    try:
        value = operator.index(ptr)
    except TypeError:
        raise _core.InvalidArgumentError(f"a pointer is an int address, got {type(ptr).__name__}") from None
    if not 0 <= value < 1 << 64:
        raise _core.InvalidArgumentError(
            f"pointer {value} is not an address (0 .. 2**64-1); pass the value the allocation returned"
        )
    return value


def raw_free(ptr: int, device: str = "cpu") -> None:
    _mem.raw_free(_address(ptr), str(device))


def allocate_pinned(nbytes: int) -> int:
    """Page-locked host memory (plain aligned host memory without CUDA)."""
    return _mem.allocate_pinned(int(nbytes))


def free_pinned(ptr: int) -> None:
    _mem.free_pinned(_address(ptr))


__all__ = [
    "MemoryStats",
    "allocate_pinned",
    "empty_cache",
    "free_pinned",
    "memory_stats",
    "raw_alloc",
    "raw_free",
    "reset_peak_stats",
    "set_memory_limit",
]
