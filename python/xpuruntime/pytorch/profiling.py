"""Profiling torch and xpuruntime together (seed 002 §7.1)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from .. import _core
from .policy import _state, decision_log

__all__ = ["profile"]


def _xrt_path(path: str) -> str:
    root, ext = os.path.splitext(path)
    return f"{root}_xrt{ext or '.json'}"


@contextmanager
def profile(
    activities: Sequence[Any] | None = None,
    record_shapes: bool = True,
    profile_memory: bool = True,
    with_stack: bool = False,
    export_chrome_trace: str | None = None,
) -> Iterator[torch.profiler.profile]:
    """Profiles the block with torch's profiler and xpuruntime's at once.

    On exit with ``export_chrome_trace="trace.json"`` torch's Chrome trace goes to
    ``trace.json`` and ours (ranges, copies, allocations) to ``trace_xrt.json``;
    the kernel-routing decisions made in the block are added to ours as
    ``xpuruntime_decisions``. Inside the block every routed call (a cache hit included)
    is also a ``xpuruntime.<op>:<kernel>`` range in torch's trace; outside it routed
    calls emit no per-call events. Yields torch's profiler object.
    """
    if activities is None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
    ours = _core.Profiler.instance()
    was_enabled = ours.enabled
    first_decision = len(decision_log())
    ours.enable()
    _state.profiling += 1
    try:
        with torch.profiler.profile(
            activities=list(activities),
            record_shapes=record_shapes,
            profile_memory=profile_memory,
            with_stack=with_stack,
        ) as prof:
            yield prof
    finally:
        _state.profiling -= 1
        if not was_enabled:
            ours.disable()
    if export_chrome_trace:
        path = str(export_chrome_trace)
        prof.export_chrome_trace(path)
        xrt = _xrt_path(path)
        ours.export_chrome_trace(xrt)
        with open(xrt, encoding="utf-8") as f:
            trace = json.load(f)
        decisions = [d.to_dict() for d in list(decision_log())[first_decision:]]
        if isinstance(trace, dict):
            trace["xpuruntime_decisions"] = decisions
        else:
            trace = {"traceEvents": trace, "xpuruntime_decisions": decisions}
        with open(xrt, "w", encoding="utf-8") as f:
            json.dump(trace, f)
