"""The collectives of :class:`~xpuruntime.distributed.Communicator` and ``group()``.

Each call validates its tensors (CUDA, contiguous, NCCL dtype, the communicator's
device, sizes: all_gather's output = world x input, reduce_scatter's input = world x
output), resolves the stream, enqueues through libxpuruntime_nccl.so and records the
case (``_record``). ``async_op=True`` returns a :class:`Work`; otherwise the call is
ordered on the stream like any kernel and returns None.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .. import _core
from .._core import InvalidArgumentError
from . import _lib, _record
from ._lib import CollectiveTimeoutError, CommunicatorAbortedError
from ._tensors import (
    NCCL_DTYPES,
    NCCL_OPS,
    TensorInfo,
    describe,
    op_code,
    require_cuda,
    same_kind,
    stream_handle,
)
from .work import Work

# nccl_abi.h XrtNcclCollective
_KIND = {
    "all_reduce": 0,
    "all_gather": 1,
    "reduce_scatter": 2,
    "broadcast": 3,
    "reduce": 4,
    "send": 5,
    "recv": 6,
}
_REDUCING = ("all_reduce", "reduce_scatter", "reduce")
_OP_NAMES = {code: name for name, code in NCCL_OPS.items()}
_tls = threading.local()


def _group_depth() -> int:
    return getattr(_tls, "depth", 0)


@contextmanager
def group() -> Iterator[None]:
    """``ncclGroupStart``/``ncclGroupEnd`` around the block: the collectives and
    send/recv issued inside run as one fused launch (needed for send/recv pairs between
    the same ranks). Calls inside return no Work; order other streams after the group
    through the stream the calls used. Nests."""
    _lib.call("group_start")
    _tls.depth = _group_depth() + 1
    try:
        yield
    finally:
        _tls.depth -= 1
        _lib.call("group_end")  # always: NCCL's group must be closed even on an exception


class Collectives:
    """Mixin: the collectives of a Communicator (which provides ``_live``, ``_call``,
    ``rank``, ``world``, ``device``)."""

    rank: int
    world: int
    device: int

    def _live(self, op: str) -> int:  # provided by Communicator
        raise NotImplementedError

    def _call(self, name: str, *args: Any) -> None:  # provided by Communicator
        raise NotImplementedError

    def _tensor(self, t: Any, name: str, where: str) -> TensorInfo:
        return describe(t, name, where)

    def _rank_arg(self, value: Any, name: str, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self.world:
            raise InvalidArgumentError(
                f"{where}: {name}={value!r} is not a rank of this communicator; use 0..{self.world - 1}"
            )
        return value

    def _run(
        self,
        op: str,
        send: TensorInfo | None,
        recv: TensorInfo | None,
        count: int,
        redop: int,
        peer: int | None,
        stream: Any,
        async_op: bool,
        names: tuple[str, str] = ("tensor", "out"),
    ) -> Work | None:
        handle = self._live(op)
        where = f"Communicator.{op}"
        for name, t in zip(names, (send, recv)):
            if t is not None:  # placement last: argument errors first, whatever the device
                require_cuda(t, name, where, self.device)
        info = send if send is not None else recv
        assert info is not None
        s = stream_handle(stream, info)
        prof = _core.Profiler.instance()
        start_ns = prof.now_ns() if prof.enabled else 0
        work = None
        if async_op and _group_depth() == 0:
            w = ctypes.c_void_p()
            self._call("work_begin", handle, s, ctypes.byref(w))
            work = Work(self, int(w.value), op, info, s)  # type: ignore[arg-type]
        self._call(
            "collective",
            handle,
            _KIND[op],
            send.ptr if send else None,
            recv.ptr if recv else None,
            count,
            NCCL_DTYPES[info.dtype],
            redop,
            -1 if peer is None else peer,
            s,
        )
        if work is not None:
            self._call("work_end", work._handle, s)
        reduce_op = _OP_NAMES[redop] if op in _REDUCING else None
        _record.record(op, info.device, info.dtype, info.shape, info.nbytes, s, self, peer, reduce_op)
        if start_ns:
            _record.profile_event(op, start_ns, info, s, self, None)
        return work

    # ---- collectives -----------------------------------------------------------------
    def all_reduce(
        self, tensor: Any, op: str = "sum", *, out: Any = None, stream: Any = None, async_op: bool = False
    ) -> Work | None:
        """Reduces ``tensor`` across ranks (``op``: sum, prod, min, max, avg) into ``out``
        (default: in place)."""
        where = "Communicator.all_reduce"
        redop = op_code(op, where)
        src = self._tensor(tensor, "tensor", where)
        dst = src if out is None else self._tensor(out, "out", where)
        same_kind(src, dst, where, ("tensor", "out"))
        if dst.numel != src.numel:
            raise InvalidArgumentError(
                f"{where}: out has {dst.numel} elements but tensor {src.numel}; they must match"
            )
        return self._run("all_reduce", src, dst, src.numel, redop, None, stream, async_op)

    def all_gather(
        self, output: Any, input: Any, *, stream: Any = None, async_op: bool = False
    ) -> Work | None:
        """Concatenates every rank's ``input`` in rank order into ``output``
        (``output.numel == world * input.numel``), like torch's all_gather_into_tensor."""
        where = "Communicator.all_gather"
        src = self._tensor(input, "input", where)
        dst = self._tensor(output, "output", where)
        same_kind(src, dst, where, ("input", "output"))
        if dst.numel != self.world * src.numel:
            raise InvalidArgumentError(
                f"{where}: output has {dst.numel} elements, must be world x input = {self.world} x {src.numel} "
                f"= {self.world * src.numel} (shape {list(src.shape)} -> e.g. [{self.world}, *input.shape])"
            )
        return self._run("all_gather", src, dst, src.numel, 0, None, stream, async_op, ("input", "output"))

    def reduce_scatter(
        self, output: Any, input: Any, op: str = "sum", *, stream: Any = None, async_op: bool = False
    ) -> Work | None:
        """Reduces ``input`` across ranks and leaves block ``rank`` of the result in
        ``output`` (``input.numel == world * output.numel``)."""
        where = "Communicator.reduce_scatter"
        redop = op_code(op, where)
        src = self._tensor(input, "input", where)
        dst = self._tensor(output, "output", where)
        same_kind(src, dst, where, ("input", "output"))
        if src.numel != self.world * dst.numel:
            raise InvalidArgumentError(
                f"{where}: input has {src.numel} elements, must be world x output = {self.world} x {dst.numel} "
                f"= {self.world * dst.numel}"
            )
        return self._run(
            "reduce_scatter", src, dst, dst.numel, redop, None, stream, async_op, ("input", "output")
        )

    def broadcast(
        self, tensor: Any, root: int = 0, *, stream: Any = None, async_op: bool = False
    ) -> Work | None:
        """Copies ``root``'s ``tensor`` into ``tensor`` on every rank (in place)."""
        where = "Communicator.broadcast"
        root = self._rank_arg(root, "root", where)
        t = self._tensor(tensor, "tensor", where)
        return self._run("broadcast", t, t, t.numel, 0, root, stream, async_op)

    def reduce(
        self,
        tensor: Any,
        root: int = 0,
        op: str = "sum",
        *,
        out: Any = None,
        stream: Any = None,
        async_op: bool = False,
    ) -> Work | None:
        """Reduces ``tensor`` across ranks into ``out`` (default: in place) on ``root`` only."""
        where = "Communicator.reduce"
        root = self._rank_arg(root, "root", where)
        redop = op_code(op, where)
        src = self._tensor(tensor, "tensor", where)
        dst = src if out is None else self._tensor(out, "out", where)
        same_kind(src, dst, where, ("tensor", "out"))
        if dst.numel != src.numel:
            raise InvalidArgumentError(f"{where}: out has {dst.numel} elements but tensor {src.numel}")
        return self._run("reduce", src, dst, src.numel, redop, root, stream, async_op)

    def send(self, tensor: Any, peer: int, *, stream: Any = None, async_op: bool = False) -> Work | None:
        """Sends ``tensor`` to rank ``peer`` (which calls :meth:`recv`; pair them in a
        ``group()`` when two ranks exchange)."""
        where = "Communicator.send"
        peer = self._rank_arg(peer, "peer", where)
        t = self._tensor(tensor, "tensor", where)
        return self._run("send", t, None, t.numel, 0, peer, stream, async_op)

    def recv(self, tensor: Any, peer: int, *, stream: Any = None, async_op: bool = False) -> Work | None:
        """Receives into ``tensor`` from rank ``peer``."""
        where = "Communicator.recv"
        peer = self._rank_arg(peer, "peer", where)
        t = self._tensor(tensor, "tensor", where)
        return self._run("recv", None, t, t.numel, 0, peer, stream, async_op)


__all__ = ["CollectiveTimeoutError", "Collectives", "CommunicatorAbortedError", "group"]
