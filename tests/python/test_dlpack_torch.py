"""DLPack with torch through the C exchange API (``__dlpack_c_exchange_api__``) and
the lean ``__dlpack__`` path: zero-copy both ways, lifetimes, strides, every dtype
torch and we share, the path actually taken (``_core._dlpack_stats()``), our own C
table driven from ctypes, and stream ordering on CUDA (GPU cases skip without one).

CPU cases: ``pytest tests/python/test_dlpack_torch.py``; GPU cases on a GPU machine:
``pytest -m gpu tests/python/test_dlpack_torch.py``.
"""

from __future__ import annotations

import ctypes
import gc
import subprocess
import sys

import numpy as np
import pytest
import xpuruntime as xrt
from xpuruntime import _core

torch = pytest.importorskip("torch", reason="torch is not installed")

# Every dtype both sides know (float8 needs torch >= 2.1).
DTYPES = [
    "float32",
    "float16",
    "bfloat16",
    "float64",
    "int8",
    "uint8",
    "int16",
    "int32",
    "int64",
    "bool",
    "float8_e4m3fn",
    "float8_e5m2",
]


def _random(shape: tuple[int, ...], dtype: str, device: str = "cpu") -> torch.Tensor:
    gen = torch.Generator(device="cpu").manual_seed(int(np.random.default_rng().integers(2**31)))
    if dtype == "bool":
        return (torch.rand(shape, generator=gen) > 0.5).to(device)
    tdtype = getattr(torch, dtype)
    if tdtype.is_floating_point:
        return (torch.randn(shape, generator=gen) * 4).to(tdtype).to(device)
    info = torch.iinfo(tdtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, generator=gen, dtype=tdtype).to(
        device
    )


def _stats() -> dict[str, int]:
    return dict(_core._dlpack_stats())


def _delta(before: dict[str, int]) -> dict[str, int]:
    after = _stats()
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


def _ours_as_float64(x: xrt.Tensor) -> np.ndarray:
    """Our reading of our memory (numpy view via ml_dtypes for bf16/fp8), as float64."""
    return np.asarray(x.numpy()).astype(np.float64)


def _torch_as_float64(t: torch.Tensor) -> np.ndarray:
    return t.to(torch.float64).numpy()


# ---- the exchange API is used ------------------------------------------------------------


def test_torch_publishes_a_table_and_we_publish_ours():
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    for cls in (torch.Tensor, xrt.Tensor):
        cap = type.__getattribute__(cls, "__dlpack_c_exchange_api__")
        assert get_name(cap) == b"dlpack_exchange_api", cls
    table = _table_of(xrt.Tensor)
    assert (table.header.major, table.header.minor) == (1, 3)
    assert not table.header.prev_api
    for field in (
        "managed_tensor_allocator",
        "managed_tensor_from_py_object_no_sync",
        "managed_tensor_to_py_object_no_sync",
        "dltensor_from_py_object_no_sync",
        "current_work_stream",
    ):
        assert getattr(table, field), field


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_every_dtype_same_memory_through_the_fast_paths(dtype):
    if dtype.startswith("float8"):
        pytest.importorskip("ml_dtypes", reason="numpy views of float8 need ml_dtypes")
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes", reason="numpy views of bfloat16 need ml_dtypes")
    t = _random((5, 7), dtype)
    before = _stats()
    x = xrt.from_dlpack(t)
    assert _delta(before) == {"import_exchange_api": 1}
    assert x.dtype == dtype and x.shape == (5, 7) and x.strides == (7, 1) and x.device == "cpu"
    assert x.data_ptr == t.data_ptr()
    np.testing.assert_array_equal(_ours_as_float64(x), _torch_as_float64(t))

    before = _stats()
    back = torch.from_dlpack(x)
    assert _delta(before) == {"export_dunder_fast": 1}
    assert back.dtype == t.dtype and back.data_ptr() == t.data_ptr() and back.stride() == (7, 1)
    assert torch.equal(
        back.view(torch.uint8) if dtype.startswith("float8") else back,
        t.view(torch.uint8) if dtype.startswith("float8") else t,
    )

    before = _stats()
    via_c = x.to_torch()
    assert _delta(before) == {"to_torch": 1}
    assert via_c.dtype == t.dtype and via_c.data_ptr() == t.data_ptr()


def test_writes_show_through_both_ways():
    t = torch.zeros(64, dtype=torch.float32)
    x = xrt.from_dlpack(t)
    t[3] = 7.5  # torch writes, we read
    assert x.numpy()[3] == 7.5
    x.copy_(np.arange(64, dtype=np.float32))  # we write, torch reads
    assert torch.equal(t, torch.arange(64, dtype=torch.float32))
    y = x.to_torch()
    y.mul_(2)
    np.testing.assert_array_equal(x.numpy(), 2 * np.arange(64, dtype=np.float32))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int16", "bool"])
def test_non_contiguous_views_keep_strides_and_address(dtype):
    pytest.importorskip("ml_dtypes", reason="numpy views of bfloat16 need ml_dtypes")
    base = _random((6, 8, 5), dtype)
    views = [
        base[:, ::2],
        base.permute(2, 0, 1),
        base[1:5, 3:, 2:],
        base[::3, ::2, 1],
        base[:1].expand(4, 8, 5),
        base[2, 3, 4],
    ]
    for v in views:
        x = xrt.from_dlpack(v)
        assert x.shape == tuple(v.shape) and x.strides == tuple(v.stride()), v.shape
        assert x.data_ptr == v.data_ptr()
        np.testing.assert_array_equal(_ours_as_float64(x), _torch_as_float64(v))
        np.testing.assert_array_equal(
            np.asarray(x.contiguous().numpy()).astype(np.float64), _torch_as_float64(v.contiguous())
        )
        for back in (torch.from_dlpack(x), x.to_torch()):
            assert back.data_ptr() == v.data_ptr() and back.stride() == v.stride()
            assert torch.equal(back, v)


def test_empty_tensors_round_trip():
    for shape in [(0,), (3, 0, 2)]:
        t = torch.empty(shape)
        x = xrt.from_dlpack(t)
        assert x.shape == shape and x.numel == 0
        assert torch.from_dlpack(x).shape == shape
        assert x.to_torch().shape == shape


def test_producer_kept_alive_after_del():
    t = torch.randn(100_003, dtype=torch.float64)
    expected = t.numpy().copy()
    ptr = t.data_ptr()
    x = xrt.from_dlpack(t)
    del t
    gc.collect()
    junk = [torch.full((100_003,), 7.0, dtype=torch.float64) for _ in range(4)]  # would reuse a freed block
    np.testing.assert_array_equal(x.numpy(), expected)
    back = torch.from_dlpack(x)
    del x
    gc.collect()
    junk += [torch.full((100_003,), 9.0, dtype=torch.float64) for _ in range(4)]
    assert back.data_ptr() == ptr
    np.testing.assert_array_equal(back.numpy(), expected)
    del junk


def test_our_storage_kept_alive_by_torch():
    gc.collect()
    # The allocator may serve x from a larger cached block (what earlier tests freed),
    # so x's own count is measured, not assumed to be 4096 * 4.
    base = xrt.memory.memory_stats("cpu").allocated_bytes
    x = xrt.Tensor.empty((4096,), "float32")
    x.copy_(np.arange(4096, dtype=np.float32))
    before = xrt.memory.memory_stats("cpu").allocated_bytes
    assert before >= base + 4096 * 4
    a, b = torch.from_dlpack(x), x.to_torch()
    del x
    gc.collect()
    assert xrt.memory.memory_stats("cpu").allocated_bytes == before  # still held by torch
    np.testing.assert_array_equal(a.numpy(), np.arange(4096, dtype=np.float32))
    del a
    gc.collect()
    assert xrt.memory.memory_stats("cpu").allocated_bytes == before
    np.testing.assert_array_equal(b.numpy(), np.arange(4096, dtype=np.float32))
    del b
    gc.collect()
    assert xrt.memory.memory_stats("cpu").allocated_bytes == base


def test_parameters_import_through_the_c_table():
    # torch's C table exports tensors that require grad (its Python __dlpack__ refuses):
    # kernels that read parameters need exactly that.
    p = torch.nn.Parameter(torch.randn(17))
    before = _stats()
    x = xrt.from_dlpack(p)
    assert _delta(before) == {"import_exchange_api": 1}
    assert x.data_ptr == p.data_ptr()
    np.testing.assert_array_equal(x.numpy(), p.detach().numpy())


def test_unsupported_dtype_raises_and_releases_the_producer():
    t = torch.ones(8, dtype=torch.complex64)
    uses = t._use_count()  # references to t's TensorImpl; a live export holds one
    before = _stats()
    with pytest.raises(xrt.UnsupportedOperationError, match="code=5"):
        xrt.from_dlpack(t)
    assert _delta(before) == {}
    assert t._use_count() == uses  # torch's export was released
    held = torch.ones(3)  # while the count does see a live export
    y = xrt.from_dlpack(held)
    assert held._use_count() == 2
    del y
    assert held._use_count() == 1


# ---- __dlpack__ arguments keep their semantics -----------------------------------------


def test_dunder_dlpack_arguments():
    a = np.arange(6, dtype=np.int64)
    x = xrt.Tensor.from_numpy(a)
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    before = _stats()
    assert get_name(x.__dlpack__()) == b"dltensor"
    assert get_name(x.__dlpack__(max_version=(1, 1))) == b"dltensor_versioned"
    assert get_name(x.__dlpack__(max_version=(0, 8))) == b"dltensor"
    assert (
        get_name(x.__dlpack__(stream=None, max_version=(1, 0), dl_device=(1, 0), copy=False))
        == b"dltensor_versioned"
    )
    assert get_name(x.__dlpack__(stream=-1)) == b"dltensor"
    assert _delta(before) == {"export_dunder_fast": 5}
    copied = np.from_dlpack(xrt.from_dlpack(x.__dlpack__(max_version=(1, 1), copy=True)))
    assert copied.ctypes.data != a.ctypes.data
    np.testing.assert_array_equal(copied, a)
    assert _stats()["export_dunder_general"] == before["export_dunder_general"] + 1
    t = torch.from_dlpack(x, copy=True)
    assert t.data_ptr() != a.ctypes.data and torch.equal(t, torch.from_numpy(a))
    with pytest.raises(xrt.InvalidArgumentError, match="stream must be None"):
        x.__dlpack__(stream=5)
    with pytest.raises(TypeError, match="keyword arguments only"):
        x.__dlpack__(None)
    with pytest.raises(TypeError, match="unexpected keyword argument 'strem'"):
        x.__dlpack__(strem=None)
    with pytest.raises(BufferError, match="copy=False"):
        x.__dlpack__(dl_device=(2, 0), copy=False)
    assert x.__dlpack_device__() == (1, 0)


def test_import_paths_other_than_the_table_still_work():
    a = np.arange(10, dtype=np.float32)
    before = _stats()
    assert xrt.from_dlpack(a).data_ptr == a.ctypes.data  # numpy: buffer protocol
    assert xrt.from_dlpack(torch.utils.dlpack.to_dlpack(torch.from_numpy(a))).data_ptr == a.ctypes.data
    assert xrt.from_dlpack(_DunderOnly(a)).data_ptr == a.ctypes.data
    assert _delta(before) == {"import_capsule": 1, "import_dunder": 1}
    with pytest.raises(xrt.InvalidArgumentError, match="cannot make a tensor from an object of type object"):
        xrt.from_dlpack(object())


class _DunderOnly:
    """A producer with only the Python protocol (delegates to numpy)."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


class _BadTableName(_DunderOnly):
    __dlpack_c_exchange_api__ = torch.utils.dlpack.to_dlpack(torch.zeros(1))  # a capsule, wrong name


class _NotACapsule(_DunderOnly):
    __dlpack_c_exchange_api__ = 12345


def test_unusable_tables_fall_back_to_the_python_protocol():
    a = np.arange(4, dtype=np.float32)
    for cls in (_BadTableName, _NotACapsule, _future_major_class(prev_api=None)):
        before = _stats()
        assert xrt.from_dlpack(cls(a)).data_ptr == a.ctypes.data, cls
        assert _delta(before) == {"import_dunder": 1}, cls


def test_a_newer_major_table_is_walked_down_to_ours():
    # A table of major 2 whose prev_api is torch's major-1 table: we must take the latter.
    torch_table = ctypes.cast(_capsule_pointer(torch.Tensor.__dlpack_c_exchange_api__), ctypes.c_void_p)
    cls = _future_major_class(prev_api=torch_table.value, base=torch.Tensor)
    t = torch.arange(9.0).as_subclass(cls)
    before = _stats()
    x = xrt.from_dlpack(t)
    assert _delta(before) == {"import_exchange_api": 1}
    assert x.data_ptr == t.data_ptr()


# ---- our C table, driven from C (ctypes) -------------------------------------------------


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _Managed(ctypes.Structure):
    pass


_Managed._fields_ = [
    ("major", ctypes.c_uint32),
    ("minor", ctypes.c_uint32),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", _DLTensor),
]


class _Header(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("prev_api", ctypes.c_void_p)]


_SET_ERROR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)
# PYFUNCTYPE: called with the GIL held; a Python error the callee sets is raised.
_ALLOCATOR = ctypes.PYFUNCTYPE(
    ctypes.c_int,
    ctypes.POINTER(_DLTensor),
    ctypes.POINTER(ctypes.POINTER(_Managed)),
    ctypes.c_void_p,
    _SET_ERROR,
)
_FROM_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.POINTER(_Managed)))
_TO_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.POINTER(_Managed), ctypes.POINTER(ctypes.py_object))
_DLTENSOR_FROM_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(_DLTensor))
_WORK_STREAM = ctypes.PYFUNCTYPE(
    ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p)
)


class _Table(ctypes.Structure):
    _fields_ = [
        ("header", _Header),
        ("managed_tensor_allocator", _ALLOCATOR),
        ("managed_tensor_from_py_object_no_sync", _FROM_PY),
        ("managed_tensor_to_py_object_no_sync", _TO_PY),
        ("dltensor_from_py_object_no_sync", _DLTENSOR_FROM_PY),
        ("current_work_stream", _WORK_STREAM),
    ]


def _capsule_pointer(capsule: object) -> int:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return get(capsule, b"dlpack_exchange_api")


def _table_of(cls: type) -> _Table:
    return _Table.from_address(_capsule_pointer(type.__getattribute__(cls, "__dlpack_c_exchange_api__")))


_KEEP: list[object] = []  # ctypes buffers behind the fake tables must outlive the process' caches


def _future_major_class(prev_api: int | None, base: type = _DunderOnly) -> type:
    header = _Header(2, 0, prev_api)
    _KEEP.append(header)
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    name = ctypes.c_char_p(b"dlpack_exchange_api")
    _KEEP.append(name)
    cap = new(ctypes.addressof(header), name, None)
    return type(f"_FutureMajor{len(_KEEP)}", (base,), {"__dlpack_c_exchange_api__": cap})


def test_our_table_exports_to_torchs_table_and_back():
    ours, theirs = _table_of(xrt.Tensor), _table_of(torch.Tensor)
    x = xrt.Tensor.from_numpy(np.arange(24, dtype=np.float32).reshape(4, 6)).transpose(0, 1)
    managed = ctypes.POINTER(_Managed)()
    before = _stats()
    assert ours.managed_tensor_from_py_object_no_sync(x, ctypes.byref(managed)) == 0
    assert _delta(before) == {"export_exchange_api": 1}
    m = managed.contents
    assert (m.major, m.minor, m.flags) == (1, 1, 0)
    dl = m.dl_tensor
    assert dl.data == x.data_ptr and (dl.device.device_type, dl.ndim) == (1, 2)
    assert (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) == (2, 32, 1)
    assert [dl.shape[i] for i in range(2)] == [6, 4] and [dl.strides[i] for i in range(2)] == [1, 6]
    out = ctypes.py_object()
    assert theirs.managed_tensor_to_py_object_no_sync(managed, ctypes.byref(out)) == 0  # torch owns it now
    t = out.value
    assert isinstance(t, torch.Tensor) and t.data_ptr() == x.data_ptr and t.stride() == (1, 6)
    np.testing.assert_array_equal(t.numpy(), x.numpy())
    # torch → ours through the tables, no Python protocol involved.
    src = torch.randn(3, 5)
    assert theirs.managed_tensor_from_py_object_no_sync(src, ctypes.byref(managed)) == 0
    assert ours.managed_tensor_to_py_object_no_sync(managed, ctypes.byref(out)) == 0
    y = out.value
    assert isinstance(y, xrt.Tensor) and y.data_ptr == src.data_ptr()
    np.testing.assert_array_equal(y.numpy(), src.numpy())


def test_our_table_borrowed_view_stream_and_allocator():
    ours = _table_of(xrt.Tensor)
    x = xrt.Tensor.from_numpy(np.zeros((2, 3), dtype=np.float16))
    view = _DLTensor()
    assert ours.dltensor_from_py_object_no_sync(x, ctypes.byref(view)) == 0
    assert view.data == x.data_ptr and view.ndim == 2 and (view.dtype.code, view.dtype.bits) == (2, 16)
    assert [view.shape[i] for i in range(2)] == [2, 3] and [view.strides[i] for i in range(2)] == [3, 1]
    stream = ctypes.c_void_p(1)
    assert ours.current_work_stream(1, 0, ctypes.byref(stream)) == 0 and not stream.value

    shape = (ctypes.c_int64 * 3)(2, 0, 5)
    proto = _DLTensor(None, _DLDevice(1, 0), 3, _DLDataType(0, 32, 1), shape, None, 0)
    errors: list[tuple[bytes, bytes]] = []
    set_error = _SET_ERROR(lambda ctx, kind, msg: errors.append((kind, msg)))
    managed = ctypes.POINTER(_Managed)()
    assert ours.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(managed), None, set_error) == 0
    out = ctypes.py_object()
    assert ours.managed_tensor_to_py_object_no_sync(managed, ctypes.byref(out)) == 0
    assert out.value.shape == (2, 0, 5) and out.value.dtype == "int32"
    shape[1] = 4
    assert ours.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(managed), None, set_error) == 0
    assert ours.managed_tensor_to_py_object_no_sync(managed, ctypes.byref(out)) == 0
    assert out.value.shape == (2, 4, 5) and out.value.nbytes == 160 and errors == []
    opencl = _DLTensor(None, _DLDevice(4, 0), 3, _DLDataType(2, 32, 1), shape, None, 0)
    assert ours.managed_tensor_allocator(ctypes.byref(opencl), ctypes.byref(managed), None, set_error) == -1
    assert (
        not managed
        and errors
        and errors[0][0] == b"TypeError"
        and b"kDLCPU or its devices' own codes" in errors[0][1]
    )
    # Not our type: a Python error, not a crash.
    with pytest.raises(TypeError, match="got a numpy.ndarray"):
        ours.managed_tensor_from_py_object_no_sync(np.zeros(3), ctypes.byref(managed))
    with pytest.raises(TypeError, match="got a numpy.ndarray"):
        ours.dltensor_from_py_object_no_sync(np.zeros(3), ctypes.byref(view))


def test_to_torch_without_torch_says_how_to_fix():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import xpuruntime as xrt\n"
        "try:\n    xrt.Tensor.empty((2,)).to_torch()\n"
        "except xrt.BackendUnavailableError as e:\n    print('OK', e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("OK") and "pip install torch" in out.stdout


# ---- CUDA: stream ordering (skips without a GPU) -----------------------------------------


def _cuda_reason() -> str:
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    if xrt.get_device_count() == 0:
        return xrt.runtime.device.cuda_unavailable_reason() or "xpuruntime sees no CUDA device"
    return ""


requires_gpu = pytest.mark.skipif(bool(_cuda_reason()), reason=f"no CUDA: {_cuda_reason()}")


class _Spin:
    """The CUDA plugin's test kernels: a timed spin and y += a*x, on a given stream."""

    def __init__(self) -> None:
        # Entry points from the plugin's lookup (names and types in cuda_kernels_abi.h).
        spin = _core.plugin_lookup("cuda", "test_spin")
        axpy = _core.plugin_lookup("cuda", "test_axpy")
        assert spin and axpy, f"CUDA plugin test kernels not found: {_core.plugin_statuses()}"
        self._spin = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_double, ctypes.c_void_p)(spin)
        self._axpy = ctypes.CFUNCTYPE(
            ctypes.c_int32, ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p
        )(axpy)

    def spin(self, ms: float, stream: int) -> None:
        assert self._spin(ms, stream) == 0

    def axpy(self, a: float, x_ptr: int, y_ptr: int, n: int, stream: int) -> None:
        assert self._axpy(a, x_ptr, y_ptr, n, stream) == 0


@pytest.mark.gpu
@requires_gpu
def test_cuda_import_waits_for_torchs_current_stream():
    n = 1 << 20
    src = torch.zeros(n, device="cuda")
    torch.cuda.synchronize()
    side = torch.cuda.Stream()  # non-blocking: no implicit ordering with our default stream
    before = _stats()
    with torch.cuda.stream(side):
        _Spin().spin(50.0, side.cuda_stream)
        src.fill_(3.0)  # queued behind the spin on torch's current stream
        ours = xrt.from_dlpack(src)
    assert _delta(before) == {"import_exchange_api": 1, "stream_waits": 1}
    np.testing.assert_array_equal(ours.numpy(), np.full(n, 3.0, np.float32))  # read on our stream


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("how", ["torch.from_dlpack", "to_torch"])
def test_cuda_export_makes_torchs_current_stream_wait_for_ours(how):
    n = 1 << 20
    ones = xrt.from_dlpack(torch.ones(n, device="cuda"))
    y = xrt.from_dlpack(torch.zeros(n, device="cuda"))
    torch.cuda.synchronize()
    ours, theirs = xrt.stream.create_stream("cuda:0"), torch.cuda.Stream()
    with xrt.stream.use_stream(ours), torch.cuda.stream(theirs):
        spin = _Spin()
        spin.spin(50.0, ours.handle)
        spin.axpy(2.0, ones.data_ptr, y.data_ptr, n, ours.handle)  # y = 2, behind the spin
        before = _stats()
        back = torch.from_dlpack(y) if how == "torch.from_dlpack" else y.to_torch()
        assert _delta(before)["stream_waits"] == 1
        result = back.cpu()  # torch reads on `theirs`
    np.testing.assert_array_equal(result.numpy(), np.full(n, 2.0, np.float32))


@pytest.mark.gpu
@requires_gpu
def test_cuda_same_stream_round_trip_inserts_no_wait():
    t = torch.randn(1024, device="cuda")
    torch.cuda.synchronize()
    before = _stats()
    back = torch.from_dlpack(xrt.from_dlpack(t))
    assert back.data_ptr() == t.data_ptr()
    assert _delta(before) == {"import_exchange_api": 1, "export_dunder_fast": 1}
