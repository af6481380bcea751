"""Streams, events and graph capture (seed 001 §2.2 StreamManager)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .. import _core

Stream = _core.Stream
Event = _core.Event
Graph = _core.Graph


def create_stream(device: str = "cpu", priority: int = 0) -> _core.Stream:
    """A new stream on ``device`` (lower priority numbers run first on CUDA)."""
    return _core.streams.create_stream(str(device), priority)


def default_stream(device: str = "cpu") -> _core.Stream:
    return _core.streams.default_stream(str(device))


def current_stream(device: str = "cpu") -> _core.Stream:
    """The calling thread's current stream of ``device``."""
    return _core.streams.current_stream(str(device))


def set_current_stream(stream: _core.Stream) -> None:
    _core.streams.set_current_stream(stream)


@contextmanager
def use_stream(stream: _core.Stream) -> Iterator[_core.Stream]:
    """Make ``stream`` current inside the block, restoring the previous one after."""
    previous = current_stream(stream.device)
    set_current_stream(stream)
    try:
        yield stream
    finally:
        set_current_stream(previous)


class CapturedGraph:
    """Holds the graph captured by :func:`capture_graph` once the block ends."""

    def __init__(self, stream: _core.Stream) -> None:
        self.stream = stream
        self.graph: _core.Graph | None = None

    def replay(self) -> None:
        """Launch the captured work again on the capture stream."""
        if self.graph is None:
            raise _core.InvalidArgumentError("the graph has not been captured yet (leave the with-block first)")
        self.graph.replay(self.stream)


@contextmanager
def capture_graph(stream: _core.Stream) -> Iterator[CapturedGraph]:
    """Capture the work issued on ``stream`` (a non-default CUDA stream) into a graph.

    Example::

        s = create_stream("cuda:0")
        with capture_graph(s) as g:
            ...  # enqueue work on s
        g.replay()
    """
    capture = _core.GraphCapture(stream)
    holder = CapturedGraph(stream)
    capture.begin()
    with use_stream(stream):
        try:
            yield holder
        except BaseException:
            capture.end()
            raise
    holder.graph = capture.end()


__all__ = [
    "Stream",
    "Event",
    "Graph",
    "create_stream",
    "default_stream",
    "current_stream",
    "set_current_stream",
    "use_stream",
    "capture_graph",
    "CapturedGraph",
]
