"""Foundation: devices, tensors and DLPack, the allocator, errors, the profiler."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import numpy as np
import pytest

import xpuruntime as xrt

NUMPY_DTYPES = ["float32", "float16", "float64", "int8", "uint8", "int16", "int32", "int64", "bool"]


def _random(shape, dtype, rng):
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if np.issubdtype(np.dtype(dtype), np.integer):
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), size=shape, dtype=dtype)
    return rng.standard_normal(shape).astype(dtype)


# ---- devices -----------------------------------------------------------------


def test_devices_enumerate_cpu_last_and_explain_missing_cuda():
    devices = xrt.get_all_devices()
    assert devices[-1].type == "cpu"
    assert devices[-1].total_memory > 0
    assert len(devices) == xrt.get_device_count() + 1
    info = devices[-1].info
    for field in ("device_id", "name", "total_memory", "free_memory", "compute_capability_major",
                  "compute_capability_minor", "sm_count", "supports_fp16", "supports_bf16", "supports_int8",
                  "device_type"):
        assert hasattr(info, field)
    if xrt.get_device_count() == 0:
        reason = xrt.runtime.device.cuda_unavailable_reason()
        assert reason, "without CUDA devices the reason must be available"
        assert str(xrt.get_current_device()) == "cpu"
        with pytest.raises(xrt.InvalidArgumentError, match="CUDA"):
            xrt.Device(0)
    with pytest.raises(xrt.InvalidArgumentError, match="unknown device"):
        xrt.Device("tpu:0")
    xrt.synchronize()  # on the current device: must not raise


def test_device_kinds_come_from_the_core_plugin_table():
    kinds = xrt.runtime.device.device_kinds()
    assert kinds[-1] == "cpu" and len(set(kinds)) == len(kinds)
    assert xrt.runtime.device.accelerator_kind() == kinds[0]
    for kind in kinds:
        spec = xrt._core.DeviceSpec(kind if kind == "cpu" else f"{kind}:3")
        assert spec.type == kind
        assert str(spec) == ("cpu" if kind == "cpu" else f"{kind}:3")
        assert xrt._core.DeviceSpec(str(spec)) == spec
    with pytest.raises(xrt.InvalidArgumentError) as e:
        xrt._core.DeviceSpec("tpu:0")
    for kind in kinds:  # the error lists what this build knows
        assert f"'{kind}'" in str(e.value)
    # The backend answers attributes by key: the CPU has no capability.
    assert xrt.runtime.device.device_attribute("cpu", "capability") == ""
    assert xrt.runtime.device.unavailable_reason("cpu") == ""


# ---- DLPack and numpy ----------------------------------------------------------


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_numpy_dlpack_round_trip_every_dtype_same_address(dtype):
    rng = np.random.default_rng()
    a = _random((5, 7), dtype, rng)
    t = xrt.from_dlpack(a)
    assert t.dtype == dtype and t.shape == (5, 7) and t.device == "cpu"
    assert t.data_ptr == a.ctypes.data
    b = np.from_dlpack(t)
    assert b.ctypes.data == a.ctypes.data
    np.testing.assert_array_equal(b, a)
    c = t.numpy()
    assert c.ctypes.data == a.ctypes.data
    a.flat[3] = a.flat[4]  # a write through numpy shows through our view
    assert t.numpy().flat[3] == a.flat[4]


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_non_contiguous_views_keep_strides_and_address(dtype):
    rng = np.random.default_rng()
    base = _random((6, 8, 4), dtype, rng)
    views = [base[:, ::2], base.transpose(2, 0, 1), base[1:5, 3:, ::-1], base[::3, ::-2, 1]]
    for v in views:
        t = xrt.from_dlpack(v)
        assert t.shape == v.shape
        assert t.strides == tuple(s // v.itemsize for s in v.strides)
        assert t.data_ptr == v.ctypes.data
        back = np.from_dlpack(t)
        assert back.ctypes.data == v.ctypes.data
        np.testing.assert_array_equal(back, v)
        np.testing.assert_array_equal(t.contiguous().numpy(), np.ascontiguousarray(v))


def test_versioned_and_legacy_capsules():
    a = np.arange(10, dtype=np.float32)
    t = xrt.Tensor.from_numpy(a)
    legacy = t.__dlpack__()
    versioned = t.__dlpack__(max_version=(1, 1))
    import ctypes

    ctypes.pythonapi.PyCapsule_GetName.restype = ctypes.c_char_p
    ctypes.pythonapi.PyCapsule_GetName.argtypes = [ctypes.py_object]
    assert ctypes.pythonapi.PyCapsule_GetName(legacy) == b"dltensor"
    assert ctypes.pythonapi.PyCapsule_GetName(versioned) == b"dltensor_versioned"
    for cap in (legacy, versioned):
        u = xrt.from_dlpack(cap)
        assert u.data_ptr == a.ctypes.data
    assert ctypes.pythonapi.PyCapsule_GetName(versioned) == b"used_dltensor_versioned"
    with pytest.raises(xrt.InvalidArgumentError, match="already consumed"):
        xrt.from_dlpack(versioned)
    assert t.__dlpack_device__() == (1, 0)


def test_dlpack_copy_flag_and_device_argument():
    a = np.arange(6, dtype=np.int64)
    t = xrt.Tensor.from_numpy(a)
    copied = np.from_dlpack(xrt.from_dlpack(t.__dlpack__(max_version=(1, 1), copy=True)))
    assert copied.ctypes.data != a.ctypes.data
    np.testing.assert_array_equal(copied, a)
    same = xrt.from_dlpack(t.__dlpack__(max_version=(1, 1), dl_device=(1, 0), copy=False))
    assert same.data_ptr == a.ctypes.data
    with pytest.raises(xrt.InvalidArgumentError, match="stream must be None"):
        t.__dlpack__(stream=5)


def test_producer_kept_alive_while_we_hold_its_memory():
    a = np.arange(1000, dtype=np.float64) * 3.0
    expected = a.copy()
    t = xrt.from_dlpack(a)
    del a
    gc.collect()
    np.testing.assert_array_equal(t.numpy(), expected)


def test_our_storage_kept_alive_by_numpy_consumer():
    t = xrt.Tensor.empty((128,), "float32")
    t.copy_(np.arange(128, dtype=np.float32))
    b = np.from_dlpack(t)
    before = xrt.memory.memory_stats("cpu").allocated_bytes
    del t
    gc.collect()
    assert xrt.memory.memory_stats("cpu").allocated_bytes == before  # still held by b
    np.testing.assert_array_equal(b, np.arange(128, dtype=np.float32))
    del b
    gc.collect()
    assert xrt.memory.memory_stats("cpu").allocated_bytes == before - 512


def test_bfloat16_through_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.random.default_rng().standard_normal((4, 3)).astype(ml_dtypes.bfloat16)
    t = xrt.Tensor.from_numpy(a)
    assert t.dtype == "bfloat16" and t.data_ptr == a.ctypes.data
    np.testing.assert_array_equal(t.numpy().astype(np.float32), a.astype(np.float32))


def test_bad_inputs_raise_typed_errors():
    with pytest.raises(xrt.InvalidArgumentError, match="cannot make a tensor"):
        xrt.from_dlpack(object())
    with pytest.raises(xrt.UnsupportedOperationError, match="not supported"):
        xrt.Tensor.from_numpy(np.zeros(3, dtype=np.complex64))
    with pytest.raises(xrt.InvalidArgumentError, match="unknown dtype"):
        xrt.Tensor.empty((2,), "float128")
    t = xrt.Tensor.empty((2, 3))
    with pytest.raises(xrt.InvalidArgumentError, match="cannot reshape"):
        t.reshape([4])
    with pytest.raises(xrt.InvalidArgumentError, match="does not match"):
        t.copy_(np.zeros((3, 2), dtype=np.float32))


# ---- allocator --------------------------------------------------------------------


def test_allocator_reuse_and_statistics():
    mem = xrt.memory
    gc.collect()  # no other object's block may come back to the cache mid-test
    before = mem.memory_stats("cpu")
    p = mem.raw_alloc(777_777)  # an uncommon size class (786,432 bytes)
    mem.raw_free(p)
    q = mem.raw_alloc(777_000)  # same size class
    assert q == p
    after = mem.memory_stats("cpu")
    assert after.num_allocs - before.num_allocs == 2
    assert after.num_cache_hits - before.num_cache_hits >= 1
    assert after.peak_allocated_bytes >= after.allocated_bytes
    mem.raw_free(q)
    with pytest.raises(xrt.InvalidArgumentError, match="double free"):
        mem.raw_free(q)


def test_memory_limit_oom_message_and_recovery():
    mem = xrt.memory
    mem.empty_cache("cpu")
    base = mem.memory_stats("cpu").reserved_bytes
    mem.set_memory_limit("cpu", base + (4 << 20))
    try:
        keep = xrt.Tensor.empty((3 << 20,), "uint8")
        with pytest.raises(xrt.OutOfMemoryError) as info:
            xrt.Tensor.empty((3 << 20,), "uint8")
        msg = str(info.value)
        assert "out of memory on cpu" in msg and "reserved" in msg and "limit" in msg
        assert isinstance(info.value, xrt.XpuRuntimeError)
        del keep
        gc.collect()
        again = xrt.Tensor.empty((3 << 20,), "uint8")  # usable after the error
        assert again.nbytes == 3 << 20
    finally:
        mem.set_memory_limit("cpu", 0)


# ---- errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["XpuRuntimeError", "CudaError", "OutOfMemoryError", "UnsupportedOperationError", "InvalidArgumentError",
     "PolicyError", "InvalidModelError", "BackendUnavailableError"],
)
def test_cpp_exceptions_arrive_as_the_same_python_class(name):
    cls = getattr(xrt, name)
    with pytest.raises(cls, match="boom from C\\+\\+") as info:
        xrt._core._raise_cpp_error(name, "boom from C++")
    assert type(info.value) is cls
    assert issubclass(cls, xrt.XpuRuntimeError)


# ---- streams and the profiler -------------------------------------------------------


def test_cpu_stream_events_and_trace_file(tmp_path):
    s = xrt.stream.create_stream("cpu")
    start, end = xrt.Event("cpu"), xrt.Event("cpu")
    trace = tmp_path / "trace.json"
    with xrt.profile(str(trace)) as prof:
        start.record(s)
        with xrt.profiler.record_range("outer"):
            with xrt.profiler.record_range("inner"):
                t = xrt.Tensor.empty((256,), "float32")
                t.copy_(np.ones(256, dtype=np.float32))
        end.record(s)
        s.synchronize()
    assert end.elapsed_time(start) >= 0.0
    doc = json.loads(trace.read_text())
    names = [e["name"] for e in doc["traceEvents"] if e.get("ph") == "X"]
    assert names.count("outer") == 1 and names.count("inner") == 1
    counters = doc["otherData"]["counters"]
    assert counters["syncs"] >= 1 and counters["allocs"] >= 1
    assert "outer" in prof.summary()
    with pytest.raises(xrt.UnsupportedOperationError, match="graph capture"):
        with xrt.stream.capture_graph(s):
            pass


def test_import_is_light_and_pytorch_error_message_is_exact():
    code = (
        "import sys, builtins\n"
        "real_import = builtins.__import__\n"
        "def fake(name, *a, **k):\n"
        "    if name == 'torch' or name.startswith('torch.'):\n"
        "        raise ImportError('No module named torch')\n"
        "    return real_import(name, *a, **k)\n"
        "builtins.__import__ = fake\n"
        "import xpuruntime\n"
        "assert 'torch' not in sys.modules and 'onnx' not in sys.modules\n"
        "try:\n"
        "    import xpuruntime.pytorch\n"
        "except ImportError as e:\n"
        "    print(str(e))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "xpuruntime.pytorch requires PyTorch. Install with: pip install xpuruntime[torch]"
