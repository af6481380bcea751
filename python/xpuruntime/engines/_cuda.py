"""A tiny CUDA driver probe through ctypes (not public API).

The vendor adapters need to know whether a CUDA device is present, its name and
compute capability (TensorRT cache keys) and the driver version, without importing
torch or needing our CUDA plugin. The driver library is resolved at run time, so a
machine without it simply reports "no CUDA driver".
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


@dataclass(frozen=True)
class CudaProbe:
    """What the driver says: device count (0 when unusable) and why not."""

    device_count: int
    driver_version: int  # e.g. 13000 for 13.0; 0 when unknown
    reason: str  # "" when at least one device is usable


@dataclass(frozen=True)
class CudaDeviceInfo:
    """Name and compute capability of one device."""

    index: int
    name: str
    major: int
    minor: int

    @property
    def compute_capability(self) -> str:
        return f"{self.major}.{self.minor}"


def _driver() -> ctypes.CDLL | None:
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


@functools.lru_cache(maxsize=1)
def probe() -> CudaProbe:
    """Initialize the driver once and count devices (cached for the process)."""
    lib = _driver()
    if lib is None:
        return CudaProbe(0, 0, "the CUDA driver (libcuda.so.1) is not installed on this machine")
    rc = lib.cuInit(0)
    version = ctypes.c_int(0)
    lib.cuDriverGetVersion(ctypes.byref(version))
    if rc != 0:
        return CudaProbe(
            0, version.value, f"cuInit failed with CUDA driver error {rc} (no usable GPU or driver mismatch)"
        )
    count = ctypes.c_int(0)
    rc = lib.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0 or count.value == 0:
        return CudaProbe(0, version.value, f"the CUDA driver reports no devices (cuDeviceGetCount rc={rc})")
    return CudaProbe(count.value, version.value, "")


def device_info(index: int) -> CudaDeviceInfo:
    """Name and compute capability of device ``index``; requires ``probe()`` to find it."""
    p = probe()
    if index >= p.device_count:
        raise IndexError(f"CUDA device {index} does not exist ({p.device_count} present; {p.reason})")
    lib = _driver()
    assert lib is not None  # probe() found it
    dev = ctypes.c_int(0)
    lib.cuDeviceGet(ctypes.byref(dev), index)
    buf = ctypes.create_string_buffer(256)
    lib.cuDeviceGetName(buf, 256, dev)
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    lib.cuDeviceGetAttribute(ctypes.byref(major), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
    lib.cuDeviceGetAttribute(ctypes.byref(minor), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
    return CudaDeviceInfo(index, buf.value.decode(errors="replace"), major.value, minor.value)


class CudaError(RuntimeError):
    """A CUDA driver call failed (converted to xpuruntime.CudaError by callers)."""


class DriverContext:
    """The primary context of one device, made current on the calling thread, plus
    the few driver calls the TensorRT adapter needs (memory, copies, a stream).

    The primary context is the one the CUDA runtime (and so TensorRT) uses, so
    pointers allocated here are valid there. Thread-safe: every call first makes the
    context current on the calling thread.
    """

    def __init__(self, index: int) -> None:
        lib = _driver()
        if lib is None or probe().device_count <= index:
            raise CudaError(f"CUDA device {index} is not available: {probe().reason or 'index out of range'}")
        self._lib = lib
        self.index = index
        dev = ctypes.c_int(0)
        self._check(lib.cuDeviceGet(ctypes.byref(dev), index), "cuDeviceGet")
        self._dev = dev
        self._ctx = ctypes.c_void_p()
        self._check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(self._ctx), dev), "cuDevicePrimaryCtxRetain")
        self.make_current()
        self.stream = ctypes.c_void_p()
        self._check(lib.cuStreamCreate(ctypes.byref(self.stream), 1), "cuStreamCreate")  # 1 = non-blocking
        lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        lib.cuMemcpyHtoDAsync_v2.argtypes = [
            ctypes.c_uint64,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_void_p,
        ]
        lib.cuMemcpyDtoHAsync_v2.argtypes = [
            ctypes.c_void_p,
            ctypes.c_uint64,
            ctypes.c_size_t,
            ctypes.c_void_p,
        ]

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise CudaError(f"{what} failed with CUDA driver error {rc} on device {self.index}")

    def make_current(self) -> None:
        self._check(self._lib.cuCtxSetCurrent(self._ctx), "cuCtxSetCurrent")

    def alloc(self, nbytes: int) -> int:
        self.make_current()
        ptr = ctypes.c_uint64(0)
        self._check(
            self._lib.cuMemAlloc_v2(ctypes.byref(ptr), max(int(nbytes), 1)), f"cuMemAlloc({nbytes} bytes)"
        )
        return int(ptr.value)

    def free(self, ptr: int) -> None:
        self.make_current()
        self._lib.cuMemFree_v2(ctypes.c_uint64(ptr))

    def copy_htod(self, dst: int, src_host_ptr: int, nbytes: int) -> None:
        self._check(
            self._lib.cuMemcpyHtoDAsync_v2(dst, ctypes.c_void_p(src_host_ptr), nbytes, self.stream),
            "cuMemcpyHtoDAsync",
        )

    def copy_dtoh(self, dst_host_ptr: int, src: int, nbytes: int) -> None:
        self._check(
            self._lib.cuMemcpyDtoHAsync_v2(ctypes.c_void_p(dst_host_ptr), src, nbytes, self.stream),
            "cuMemcpyDtoHAsync",
        )

    def synchronize(self) -> None:
        self._check(self._lib.cuStreamSynchronize(self.stream), "cuStreamSynchronize")


class DeviceArray:
    """A device buffer this adapter allocated: shape, dtype, pointer; freed with it.

    Exposes ``__cuda_array_interface__`` (torch.as_tensor, cupy, numba read it
    without copying) and ``numpy()`` for a host copy.
    """

    def __init__(self, ctx: DriverContext, shape: tuple[int, ...], dtype: object) -> None:
        import numpy as np

        self._ctx = ctx
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.ptr = ctx.alloc(self.nbytes)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "version": 3,
            "strides": None,
        }

    def numpy(self):
        import numpy as np

        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            self._ctx.copy_dtoh(out.ctypes.data, self.ptr, self.nbytes)
            self._ctx.synchronize()
        return out

    def __del__(self) -> None:
        ptr, self.ptr = getattr(self, "ptr", 0), 0
        if ptr:
            try:
                self._ctx.free(ptr)
            except Exception:  # noqa: BLE001, S110 - never raise from a finalizer (interpreter shutdown)
                pass
