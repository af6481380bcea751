"""``Work``: the handle of an enqueued collective (``async_op=True``)."""

from __future__ import annotations

import ctypes
from typing import Any

from .. import _core
from .._core import InvalidArgumentError
from . import _lib, _record
from ._lib import CollectiveTimeoutError, CommunicatorAbortedError
from ._tensors import TensorInfo, stream_handle


class Work:
    """An enqueued collective (``async_op=True``): ``wait()`` blocks the host until it
    finished (or raises instead of hanging), ``is_completed()`` polls, ``wait_stream``
    orders another stream after it. Inside CUDA-graph capture the work belongs to the
    graph: it is complete at once and each replay runs it again.

    Not thread-safe; holds its Communicator alive.
    """

    def __init__(self, comm: Any, handle: int, op: str, info: TensorInfo, stream: int) -> None:
        self._comm, self._handle, self._op, self._info, self._stream = comm, handle, op, info, stream
        self._done = False

    def _live(self) -> int:
        if self._comm._handle is None:
            raise InvalidArgumentError(
                f"Work({self._op}): its communicator was destroyed or aborted; the result is undefined"
            )
        return self._handle

    def _guard(self, name: str, *args: Any) -> None:
        try:
            _lib.call(name, *args)
        except (CollectiveTimeoutError, CommunicatorAbortedError):
            self._comm._mark_aborted()
            raise

    def is_completed(self) -> bool:
        """True once the collective finished on the device (raises on a NCCL error)."""
        if self._done:
            return True
        done = ctypes.c_int()
        self._guard("work_query", self._live(), ctypes.byref(done))
        self._done = bool(done.value)
        return self._done

    def wait(self, timeout: float | None = None) -> None:
        """Blocks until done. ``timeout`` seconds (default: the communicator's) after which
        the communicator is aborted and CollectiveTimeoutError raised; a dead peer raises
        CommunicatorAbortedError."""
        if not self._done:
            self._guard("work_wait", self._live(), float(timeout or 0.0))
            self._done = True
            if _core.Profiler.instance().enabled:
                _record.profile_event(
                    f"{self._op}.device",
                    _core.Profiler.instance().now_ns(),
                    self._info,
                    self._stream,
                    self._comm,
                    self.elapsed_ms(),
                )

    def wait_stream(self, stream: Any) -> None:
        """Makes ``stream`` wait for this work on the device, without blocking the host."""
        self._guard("work_stream_wait", self._live(), stream_handle(stream, self._info))

    def elapsed_ms(self) -> float:
        """Device milliseconds the collective took (0.0 when captured in a graph)."""
        if not self.is_completed():
            raise InvalidArgumentError(f"Work({self._op}).elapsed_ms: not finished yet; call wait() first")
        ms = ctypes.c_float()
        self._guard("work_elapsed_ms", self._live(), ctypes.byref(ms))
        return float(ms.value)

    def __del__(self) -> None:
        # The events are the work's own (not the communicator's): always freed.
        if getattr(self, "_handle", None):
            _lib.library().xrt_nccl_work_destroy(self._handle)
