"""``UniqueId``: the 128 bytes every rank of a communicator must share, and the three
ways to hand them over (torch.distributed's group, a file, an environment variable)."""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

from .._core import InvalidArgumentError
from . import _lib

ENV_VAR = "XRT_NCCL_UNIQUE_ID"


class UniqueId:
    """An NCCL unique id (``ncclUniqueId``, 128 bytes): created once by one rank
    (``UniqueId.generate()``), then given to every rank of the communicator.

    Immutable; thread-safe.
    """

    __slots__ = ("_data",)

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(
                f"UniqueId: expected {_lib.UNIQUE_ID_BYTES} bytes, got a {type(data).__name__}; create one "
                "with UniqueId.generate() on one rank and send its bytes to the others"
            )
        data = bytes(data)
        if len(data) != _lib.UNIQUE_ID_BYTES:
            raise InvalidArgumentError(
                f"UniqueId: expected {_lib.UNIQUE_ID_BYTES} bytes (NCCL_UNIQUE_ID_BYTES), got {len(data)}; "
                "pass the exact bytes of UniqueId.generate() (bytes(uid)), not a hash or a prefix"
            )
        self._data = data

    @classmethod
    def generate(cls) -> UniqueId:
        """A fresh id from ``ncclGetUniqueId`` (needs libnccl only, no GPU).

        Raises:
            BackendUnavailableError: NCCL is not installed (the message says where it was looked for).
        """
        buf = ctypes.create_string_buffer(_lib.UNIQUE_ID_BYTES)
        _lib.call("unique_id", buf)
        return cls(buf.raw)

    def hex(self) -> str:
        """The id as 256 hex digits (for an environment variable or a log line)."""
        return self._data.hex()

    @classmethod
    def from_hex(cls, text: str) -> UniqueId:
        """Inverse of :meth:`hex`."""
        try:
            data = bytes.fromhex(text.strip())
        except (ValueError, AttributeError) as exc:
            raise InvalidArgumentError(
                f"UniqueId.from_hex: not hex digits ({exc}); pass UniqueId.hex() of the generating rank"
            ) from None
        return cls(data)

    @classmethod
    def from_env(cls, var: str = ENV_VAR) -> UniqueId:
        """Reads the id from an environment variable holding :meth:`hex` (set by a launcher)."""
        text = os.environ.get(var)
        if not text:
            raise InvalidArgumentError(
                f"UniqueId.from_env: ${var} is not set; the launcher must export {var}=<UniqueId.generate().hex()>"
            )
        return cls.from_hex(text)

    def to_file(self, path: str | os.PathLike[str]) -> None:
        """Writes the id to ``path`` atomically (other ranks poll it with :meth:`from_file`)."""
        tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(self._data)
        os.replace(tmp, path)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], timeout: float = 60.0) -> UniqueId:
        """Reads the id from ``path``, waiting up to ``timeout`` seconds for it to appear."""
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                raise InvalidArgumentError(
                    f"UniqueId.from_file: {os.fspath(path)!r} did not appear within {timeout} s; the "
                    "generating rank must call uid.to_file(path) on a file system every rank sees"
                )
            time.sleep(0.05)
        with open(path, "rb") as f:
            return cls(f.read())

    def __bytes__(self) -> bytes:
        return self._data

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UniqueId) and other._data == self._data

    def __hash__(self) -> int:
        return hash(self._data)

    def __repr__(self) -> str:
        return f"UniqueId({self._data[:8].hex()}…)"


def exchange_via_torch(pg: Any = None) -> UniqueId:
    """Group rank 0 generates an id and broadcasts its bytes to the group's ranks
    (``torch.distributed.broadcast_object_list``; with an NCCL group the current CUDA
    device must be set, as for any torch collective)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        raise InvalidArgumentError(
            "xpuruntime.distributed: torch.distributed is not initialized; call "
            "torch.distributed.init_process_group(...) first, or use Communicator.init with a UniqueId"
        )
    rank = dist.get_rank(pg)
    if rank < 0:
        raise InvalidArgumentError(
            "xpuruntime.distributed: this process is not a member of the given process group; only its "
            "members may create a communicator from it"
        )
    src = dist.get_global_rank(pg, 0) if pg is not None else 0
    box: list[Any] = [bytes(UniqueId.generate()) if rank == 0 else None]
    dist.broadcast_object_list(box, src=src, group=pg)
    return UniqueId(box[0])
