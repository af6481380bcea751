"""The profiler (DESIGN.md §10): ranges, copies, syncs and allocations, Chrome trace."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .. import _core

Profiler = _core.Profiler
_profiler = _core.Profiler.instance()


def enabled() -> bool:
    """Whether the profiler records now (callers skip building range names when not)."""
    return bool(_profiler.enabled)


@contextmanager
def record_range(name: str) -> Iterator[None]:
    """A named range (an NVTX range too on CUDA); free when profiling is off."""
    if not _profiler.enabled:
        yield
        return
    _profiler.push_range(name)
    try:
        yield
    finally:
        _profiler.pop_range()


@contextmanager
def profile(export_chrome_trace: str | None = None) -> Iterator[_core.Profiler]:
    """Profile the block; optionally write a Chrome/Perfetto trace on exit.

    Example::

        with xpuruntime.profile("trace.json") as prof:
            sess.run(inputs)
        print(prof.summary())
    """
    _profiler.enable()
    try:
        yield _profiler
    finally:
        _profiler.disable()
        if export_chrome_trace:
            _profiler.export_chrome_trace(str(export_chrome_trace))


def summary() -> str:
    """A text table of ranges (count, total, mean) and the counters."""
    return _profiler.summary()


def instance() -> _core.Profiler:
    return _profiler


__all__ = ["Profiler", "instance", "profile", "record_range", "summary"]
