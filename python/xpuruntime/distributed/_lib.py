"""The NCCL helper library (``libxpuruntime_nccl.so``, cpp/src/backends/nccl/) via ctypes.

The library is found next to ``_core`` (the installed package, or ``$XRT_BUILD_DIR/lib``)
or in ``$XRT_PLUGIN_DIR``. It links neither NCCL nor CUDA, so loading it always
works where it was built; NCCL's own absence is a status with its reason. Status
codes of ``nccl_abi.h`` become Python exceptions here, in one place.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import threading
from typing import Any

from .. import _core
from .._core import BackendUnavailableError, CudaError, InvalidArgumentError, XpuRuntimeError

__all__ = [
    "CollectiveTimeoutError",
    "CommunicatorAbortedError",
    "DistributedError",
    "call",
    "library",
    "library_path",
]

UNIQUE_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES (nccl_abi.h kXrtNcclUniqueIdBytes)


class DistributedError(XpuRuntimeError):
    """NCCL reported an error (the message names the call, the rank and how to fix it)."""


class CollectiveTimeoutError(DistributedError):
    """A collective or communicator init did not finish within its timeout.

    The communicator was aborted (ncclCommAbort): a peer rank died or never called the
    same collective. Create a new communicator to continue.
    """


class CommunicatorAbortedError(DistributedError):
    """NCCL's asynchronous error query reported a failure (a peer died, a network
    error): the communicator was aborted."""


# nccl_abi.h XrtNcclStatus -> exception class.
_STATUS_ERRORS: dict[int, type[Exception]] = {
    1: BackendUnavailableError,
    2: InvalidArgumentError,
    3: DistributedError,
    4: CudaError,
    5: CollectiveTimeoutError,
    6: CommunicatorAbortedError,
}

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_lib_error: str | None = None

_VP = ctypes.c_void_p
_SIGNATURES: dict[str, list[Any]] = {
    "xrt_nccl_prefer_library": [ctypes.c_char_p],
    "xrt_nccl_version": [ctypes.POINTER(ctypes.c_int)],
    "xrt_nccl_probe": [ctypes.POINTER(ctypes.c_int)],
    "xrt_nccl_unique_id": [ctypes.c_char_p],
    "xrt_nccl_comm_init": [
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_double,
        ctypes.POINTER(_VP),
    ],
    "xrt_nccl_comm_split": [_VP, ctypes.c_int, ctypes.c_int, ctypes.POINTER(_VP)],
    "xrt_nccl_comm_info": [_VP, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)],
    "xrt_nccl_comm_destroy": [_VP],
    "xrt_nccl_comm_abort": [_VP],
    "xrt_nccl_comm_check": [_VP],
    "xrt_nccl_collective": [
        _VP,
        ctypes.c_int,
        _VP,
        _VP,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        _VP,
    ],
    "xrt_nccl_group_start": [],
    "xrt_nccl_group_end": [],
    "xrt_nccl_stream_capturing": [_VP, _VP, ctypes.POINTER(ctypes.c_int)],
    "xrt_nccl_work_begin": [_VP, _VP, ctypes.POINTER(_VP)],
    "xrt_nccl_work_end": [_VP, _VP],
    "xrt_nccl_work_query": [_VP, ctypes.POINTER(ctypes.c_int)],
    "xrt_nccl_work_wait": [_VP, ctypes.c_double],
    "xrt_nccl_work_stream_wait": [_VP, _VP],
    "xrt_nccl_work_elapsed_ms": [_VP, ctypes.POINTER(ctypes.c_float)],
    "xrt_nccl_work_destroy": [_VP],
}


def library_path() -> str:
    """Where ``libxpuruntime_nccl.so`` is looked for (``$XRT_PLUGIN_DIR`` or next to ``_core``)."""
    folder = os.environ.get("XRT_PLUGIN_DIR") or os.path.dirname(os.path.abspath(_core.__file__))
    return os.path.join(folder, "libxpuruntime_nccl.so")


def torch_nccl_path() -> str:
    """The libnccl.so.2 of the ``nvidia-nccl`` wheel torch links (found without importing
    torch), or "". Loading that one keeps a single NCCL in the process: a system NCCL
    loaded first would also serve torch's ``libnccl.so.2`` and can be too old for it."""
    spec = importlib.util.find_spec("nvidia")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, "nccl", "lib", "libnccl.so.2")
        if os.path.exists(path):
            return path
    return ""


def library() -> ctypes.CDLL:
    """The loaded helper library; raises BackendUnavailableError saying why it is not there."""
    global _lib, _lib_error
    with _lock:
        if _lib is None and _lib_error is None:
            path = library_path()
            try:
                lib = ctypes.CDLL(path)
            except OSError as exc:
                _lib_error = (
                    f"the NCCL helper library is missing ({path}: {exc}). It is built when CMake finds "
                    "nccl.h and cuda.h (the CUDA toolkit's include folder): reconfigure with the toolkit "
                    "installed, or set XRT_NCCL_INCLUDE_DIR"
                )
            else:
                for name, args in _SIGNATURES.items():
                    fn = getattr(lib, name)
                    fn.argtypes = args
                    fn.restype = ctypes.c_int
                lib.xrt_nccl_last_error.argtypes = []
                lib.xrt_nccl_last_error.restype = ctypes.c_char_p
                preferred = torch_nccl_path()
                if preferred:
                    lib.xrt_nccl_prefer_library(preferred.encode())
                _lib = lib
        if _lib is None:
            raise BackendUnavailableError(f"xpuruntime.distributed: {_lib_error}")
        return _lib


def call(name: str, *args: Any) -> None:
    """Calls ``xrt_nccl_<name>``; a non-zero status raises its typed exception with the
    library's message (the GIL is released by ctypes for the call's duration)."""
    lib = library()
    status = getattr(lib, "xrt_nccl_" + name)(*args)
    if status != 0:
        raw = lib.xrt_nccl_last_error() or b""
        message = raw.decode("utf-8", errors="replace") or f"xrt_nccl_{name} failed with status {status}"
        raise _STATUS_ERRORS.get(status, DistributedError)(message)
