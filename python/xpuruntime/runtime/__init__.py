"""Low-level runtime API: devices, streams, memory and profiling (seed 004 §6.1)."""

from . import device, memory, profiler, stream

__all__ = ["device", "memory", "profiler", "stream"]
