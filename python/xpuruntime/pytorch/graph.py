"""CUDA graph capture (seed 002 §4.3): ``CUDAGraphWrapper`` and ``capture_graph``.

A whole training step (forward, backward and an optimizer built with
``capturable=True``) can be captured: our custom ops allocate through torch (so
the graph's private pool owns their memory), launch on torch's current stream
and draw dropout seeds on the device, so replays are correct and fresh.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from .. import _core

__all__ = ["CUDAGraphWrapper", "capture_graph"]


class CUDAGraphWrapper:
    """Captures a callable into a CUDA graph and replays it.

    Inputs must live in static tensors that the caller refills before each
    :meth:`replay`; the callable's return value (also static) is :attr:`output`.

    Args:
        pool: a memory pool handle (``torch.cuda.graph_pool_handle()``) to share
            between graphs; None gives the graph its own pool.
    """

    def __init__(self, pool: Any = None) -> None:
        self._graph: torch.cuda.CUDAGraph | None = None
        self._pool = pool
        self.output: Any = None

    @property
    def captured(self) -> bool:
        """True once :meth:`capture` succeeded."""
        return self._graph is not None

    @property
    def graph(self) -> torch.cuda.CUDAGraph | None:
        return self._graph

    def capture(self, fn: Callable[..., Any], *args: Any, warmup_iters: int = 3, **kwargs: Any) -> Any:
        """Runs ``fn`` ``warmup_iters`` times on a side stream, then captures one call.

        Warm-up lets lazy initialisation (cuBLAS handles, autotuning, kernel
        attributes, optimizer state) happen outside the capture. Returns the
        captured call's output (static tensors the replays rewrite).
        """
        if warmup_iters < 0:
            raise ValueError("warmup_iters must be >= 0")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup_iters):
                fn(*args, **kwargs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with _profiler_range("cuda_graph_capture"), torch.cuda.graph(graph, pool=self._pool):
            self.output = fn(*args, **kwargs)
        self._graph = graph
        return self.output

    def replay(self) -> Any:
        """Launches the captured graph on the current stream; returns :attr:`output`."""
        if self._graph is None:
            raise _core.XpuRuntimeError(
                "CUDAGraphWrapper.replay: nothing captured yet (call capture(fn) first)"
            )
        self._graph.replay()
        return self.output

    def reset(self) -> None:
        """Drops the graph (and its pool reference)."""
        if self._graph is not None:
            self._graph.reset()
        self._graph = None
        self.output = None


@contextmanager
def _profiler_range(name: str) -> Iterator[None]:
    prof = _core.Profiler.instance()
    if not prof.enabled:
        yield
        return
    prof.push_range(name)
    try:
        yield
    finally:
        prof.pop_range()


class _CaptureContext:
    """``with capture_graph() as g:`` — captures the block; ``g.replay()`` afterwards."""

    def __init__(self, pool: Any) -> None:
        self.wrapper = CUDAGraphWrapper(pool)
        self._graph = torch.cuda.CUDAGraph()
        self._ctx: Any = None
        self._range: Any = None

    def __enter__(self) -> CUDAGraphWrapper:
        self._range = _profiler_range("cuda_graph_capture")
        self._range.__enter__()
        self._ctx = torch.cuda.graph(self._graph, pool=self.wrapper._pool)
        self._ctx.__enter__()
        return self.wrapper

    def __exit__(self, *exc: object) -> bool:
        try:
            self._ctx.__exit__(*exc)
        finally:
            self._range.__exit__(*exc)
        if exc[0] is None:
            self.wrapper._graph = self._graph
        return False


def capture_graph(
    fn: Callable[..., Any] | None = None,
    *args: Any,
    warmup_iters: int = 3,
    pool: Any = None,
    **kwargs: Any,
) -> Any:
    """Captures work into a CUDA graph.

    Two forms:

    * ``graph = capture_graph(step, *args, warmup_iters=3)``: warms ``step`` up
      on a side stream, captures one call and returns a :class:`CUDAGraphWrapper`
      (``graph.output`` holds what ``step`` returned).
    * ``with capture_graph(pool=...) as graph: ...``: captures the block (warm it
      up yourself first); ``graph.replay()`` after the block.

    Example (a whole training step)::

        opt = torch.optim.AdamW(model.parameters(), capturable=True)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = model(static_x, static_y)
            loss.backward()
            opt.step()
            return loss

        graph = xrt_torch.capture_graph(step, warmup_iters=3)
        for x, y in data:
            static_x.copy_(x); static_y.copy_(y)
            graph.replay()
    """
    if fn is None:
        if args or kwargs:
            raise TypeError("capture_graph() as a context manager takes only warmup_iters and pool")
        return _CaptureContext(pool)
    wrapper = CUDAGraphWrapper(pool)
    wrapper.capture(fn, *args, warmup_iters=warmup_iters, **kwargs)
    return wrapper
