"""``Communicator``: one NCCL communicator per (rank, device), its collectives and
``Work`` handles. Arguments are validated in Python before any NCCL call; the calls
run in libxpuruntime_nccl.so (ctypes releases the GIL)."""

from __future__ import annotations

import contextlib
import ctypes
import os
from typing import Any

from .. import _core
from .._core import InvalidArgumentError
from ..policies import coerce
from . import _lib, _record
from ._collectives import Collectives
from ._lib import CollectiveTimeoutError, CommunicatorAbortedError
from .unique_id import UniqueId, exchange_via_torch


def nccl_version() -> tuple[int, int, int]:
    """NCCL's version as ``(major, minor, patch)`` (needs libnccl only, no GPU).

    Raises:
        BackendUnavailableError: libnccl.so.2 or the helper library is missing (with why).
    """
    code = _version_code()
    return code // 10000, (code // 100) % 100, code % 100


def _version_code() -> int:
    v = ctypes.c_int()
    _lib.call("version", ctypes.byref(v))
    return v.value


def unavailable_reason() -> str:
    """Why communicators cannot be created here ("" when they can): helper library or
    NCCL missing, NCCL older than 2.18, no CUDA driver or device."""
    try:
        _lib.call("probe", ctypes.byref(ctypes.c_int()))
    except _core.XpuRuntimeError as exc:
        return str(exc)
    return ""


def is_available() -> bool:
    """True when NCCL and at least one CUDA device are usable."""
    return unavailable_reason() == ""


def _check_int(value: Any, name: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{where}: {name}={value!r} must be an int")
    return value


def _default_device(rank: int) -> int:
    # torchrun's convention: LOCAL_RANK names this process's GPU; else rank modulo GPUs.
    local = os.environ.get("LOCAL_RANK")
    if local is not None and local.isdigit():
        return int(local)
    count = ctypes.c_int()
    _lib.call("probe", ctypes.byref(count))
    return rank % count.value


class Communicator(Collectives):
    """One rank's NCCL communicator on one CUDA device.

    Create with :meth:`init` (every rank passes the same :class:`UniqueId`) or
    :meth:`from_torch_process_group`. Collectives enqueue on the caller's stream (an
    ``xpuruntime.Stream``, a ``torch.cuda.Stream``, a handle, or None: torch's current
    stream for torch tensors, else xpuruntime's) and work inside CUDA-graph capture.
    Not thread-safe (NCCL's rule: one thread per communicator at a time).
    """

    def __init__(
        self,
        handle: int,
        rank: int,
        world: int,
        device: int,
        timeout: float,
        deterministic: bool,
        settings: dict[str, str],
    ) -> None:
        self._handle: int | None = handle
        self._state = "live"
        self.rank, self.world, self.device, self.timeout = rank, world, device, timeout
        self.deterministic = deterministic
        self.nccl_settings = settings
        major, minor, patch = nccl_version()
        self.nccl_version_string = f"{major}.{minor}.{patch}"

    # ---- creation ------------------------------------------------------------------
    @classmethod
    def init(
        cls,
        rank: int,
        world: int,
        unique_id: UniqueId | bytes,
        device: int | None = None,
        *,
        timeout: float = 300.0,
        policy: Any = None,
    ) -> Communicator:
        """This rank's communicator (``ncclCommInitRank``; every rank calls it).

        Args:
            rank: this process's rank, ``0 <= rank < world``.
            world: number of ranks, ``>= 1``.
            unique_id: the :class:`UniqueId` (or its 128 bytes) rank 0 generated.
            device: CUDA device index; default ``$LOCAL_RANK`` or ``rank % device count``.
            timeout: seconds init and each ``Work.wait`` may take before the
                communicator is aborted (CollectiveTimeoutError).
            policy: an ``ExecutionPolicy`` (or any form ``policies.coerce`` accepts: a
                mapping, a JSON file); ``deterministic=True`` fixes the reduction
                order (NCCL_ALGO=Ring, NCCL_PROTO=Simple) or refuses with PolicyError.

        Raises:
            InvalidArgumentError: bad rank/world/id/device/timeout (before any NCCL call).
            BackendUnavailableError: NCCL, the CUDA driver or a device is missing (why).
            CollectiveTimeoutError: not every rank joined within ``timeout``.
        """
        where = "Communicator.init"
        world = _check_int(world, "world", where)
        rank = _check_int(rank, "rank", where)
        if world < 1:
            raise InvalidArgumentError(f"{where}: world={world}; a communicator needs at least 1 rank")
        if not 0 <= rank < world:
            raise InvalidArgumentError(
                f"{where}: rank={rank} is out of range for world={world}; use 0..{world - 1}"
            )
        uid = unique_id if isinstance(unique_id, UniqueId) else UniqueId(unique_id)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise InvalidArgumentError(f"{where}: timeout={timeout!r} must be a positive number of seconds")
        if device is not None:
            device = _check_int(device, "device", where)
            if device < 0:
                raise InvalidArgumentError(f"{where}: device={device} must be a CUDA device index >= 0")
        core_policy = coerce.core_exec_policy(policy)  # any accepted policy form, checked
        deterministic = bool(core_policy.deterministic) if core_policy is not None else False
        reason = unavailable_reason()
        if reason:
            raise _core.BackendUnavailableError(f"{where}: {reason}")
        if device is None:
            device = _default_device(rank)
        settings = _record.prepare_init(deterministic)
        handle = ctypes.c_void_p()
        _lib.call("comm_init", rank, world, bytes(uid), device, float(timeout), ctypes.byref(handle))
        return cls(int(handle.value), rank, world, device, float(timeout), deterministic, settings)

    @classmethod
    def from_torch_process_group(
        cls, pg: Any = None, device: int | None = None, *, timeout: float = 300.0, policy: Any = None
    ) -> Communicator:
        """A communicator over the ranks of a torch ``ProcessGroup`` (default: the world
        group): rank and world from torch, the unique id broadcast through the group.
        ``device`` defaults to torch's current CUDA device (what torch's NCCL groups use).
        Every rank of the group must call it."""
        import torch
        import torch.distributed as dist

        uid = exchange_via_torch(pg)
        if device is None and torch.cuda.is_available():
            device = torch.cuda.current_device()
        return cls.init(
            dist.get_rank(pg), dist.get_world_size(pg), uid, device, timeout=timeout, policy=policy
        )

    def split(self, color: int, key: int | None = None) -> Communicator | None:
        """``ncclCommSplit``: ranks with the same ``color`` form a new communicator,
        ordered by ``key`` (default: this rank); a negative color returns None."""
        color = _check_int(color, "color", "Communicator.split")
        key = self.rank if key is None else _check_int(key, "key", "Communicator.split")
        out = ctypes.c_void_p()
        self._call("comm_split", self._live("split"), color, key, ctypes.byref(out))
        if not out.value:
            return None
        rank, world = ctypes.c_int(), ctypes.c_int()  # the child's are NCCL's: (key, old rank) order
        _lib.call("comm_info", out, ctypes.byref(rank), ctypes.byref(world))
        return Communicator(
            int(out.value),
            rank.value,
            world.value,
            self.device,
            self.timeout,
            self.deterministic,
            self.nccl_settings,
        )

    # ---- state ---------------------------------------------------------------------
    @property
    def is_destroyed(self) -> bool:
        """True after destroy() or abort() (or an abort caused by an error)."""
        return self._handle is None or self._state != "live"

    def _live(self, op: str) -> int:
        if self._handle is None or self._state != "live":
            state = "destroyed" if self._handle is None else self._state
            raise InvalidArgumentError(
                f"Communicator.{op}: this communicator (rank {self.rank} of {self.world}) is {state}; "
                "create a new one with Communicator.init"
            )
        return self._handle

    def _mark_aborted(self) -> None:
        self._state = "aborted"

    def _call(self, name: str, *args: Any) -> None:
        try:
            _lib.call(name, *args)
        except (CollectiveTimeoutError, CommunicatorAbortedError):
            self._mark_aborted()
            raise

    def check(self) -> None:
        """Raises CommunicatorAbortedError when NCCL reports an async error (a peer died)."""
        self._call("comm_check", self._live("check"))

    def destroy(self) -> None:
        """Finalizes (waits for this rank's outstanding work, up to ``timeout``) and frees."""
        handle, self._handle = self._handle, None
        if handle is not None:
            _lib.call("comm_destroy", handle)

    def abort(self) -> None:
        """Frees at once, cancelling outstanding work (its results are undefined)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            _lib.call("comm_abort", handle)

    def __enter__(self):  # -> Self (typing.Self needs Python 3.11)
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            # A destructor must not raise; call destroy() yourself to see its errors.
            with contextlib.suppress(_core.XpuRuntimeError):
                self.destroy()

    def __repr__(self) -> str:
        state = "destroyed" if self._handle is None else self._state
        return f"Communicator(rank={self.rank}, world={self.world}, device=cuda:{self.device}, {state})"
