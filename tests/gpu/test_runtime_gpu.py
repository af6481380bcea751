"""GPU tests of the runtime foundation (issue 2): DLPack zero-copy with torch and
cupy, the CUDA caching allocator from Python, streams/events timing, CUDA graph
replay, and DeviceInfo against torch's view of the same GPU.

Run on a GPU machine with ``pytest -m gpu tests/gpu/test_runtime_gpu.py``. Every GPU
test skips with the reason (no driver, no device, torch/cupy missing) elsewhere.
"""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest
import xpuruntime as xrt
from xpuruntime import _core
from xpuruntime.runtime.device import cuda_unavailable_reason

DEVICE = "cuda:0"


def _cuda_reason() -> str:
    """Empty when a CUDA device is usable, else why not."""
    if xrt.get_device_count() > 0:
        return ""
    return cuda_unavailable_reason() or "no CUDA device"


requires_gpu = pytest.mark.skipif(bool(_cuda_reason()), reason=f"no CUDA device: {_cuda_reason()}")


def _torch():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    return torch


def _cupy():
    cupy = pytest.importorskip("cupy", reason="cupy is not installed")
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("cupy sees no CUDA device")
    except cupy.cuda.runtime.CUDARuntimeError as e:  # pragma: no cover - driver issues
        pytest.skip(f"cupy cannot use CUDA: {e}")
    return cupy


class _TestKernels:
    """The plugin's exported test kernels (cpp/src/backends/cuda/testing_kernels.cu)."""

    def __init__(self) -> None:
        # Entry points from the plugin's lookup (names and types in cuda_kernels_abi.h).
        addr = {n: _core.plugin_lookup("cuda", n) for n in ("test_spin", "test_axpy", "test_error_name")}
        assert all(addr.values()), f"CUDA plugin test kernels not found: {_core.plugin_statuses()}"
        c = ctypes
        self._spin = c.CFUNCTYPE(c.c_int32, c.c_double, c.c_void_p)(addr["test_spin"])
        self._axpy = c.CFUNCTYPE(c.c_int32, c.c_float, c.c_void_p, c.c_void_p, c.c_int64, c.c_void_p)(
            addr["test_axpy"]
        )
        self._error_name = c.CFUNCTYPE(c.c_char_p, c.c_int32)(addr["test_error_name"])

    def _check(self, err: int) -> None:
        assert err == 0, self._error_name(err).decode()

    def spin(self, ms: float, stream_handle: int) -> None:
        self._check(self._spin(ms, stream_handle))

    def axpy(self, a: float, x_ptr: int, y_ptr: int, n: int, stream_handle: int) -> None:
        self._check(self._axpy(a, x_ptr, y_ptr, n, stream_handle))


@pytest.fixture(scope="module")
def kernels() -> _TestKernels:
    return _TestKernels()


def _cuda_tensor_from(array: np.ndarray) -> xrt.Tensor:
    """A CUDA tensor of ours holding a copy of `array`."""
    t = xrt.Tensor.empty(list(array.shape), str(array.dtype), DEVICE)
    t.copy_(array)
    return t


# ---- without a GPU ------------------------------------------------------------------


def test_without_a_gpu_cuda_reports_zero_devices_and_the_reason() -> None:
    if not _cuda_reason():
        pytest.skip("this machine has a CUDA device")
    assert xrt.get_device_count() == 0
    reason = cuda_unavailable_reason()
    assert reason, "CUDA is unavailable but no reason is given"
    # Either the plugin is missing, or it loaded and the runtime said why.
    assert "cudaGetDeviceCount" in reason or "plugin" in reason, reason
    assert [d.type for d in xrt.get_all_devices()] == ["cpu"]
    with pytest.raises(xrt.InvalidArgumentError, match="cudaGetDeviceCount|plugin"):
        xrt.memory.raw_alloc(1024, DEVICE)


# ---- device info ----------------------------------------------------------------------


@pytest.mark.gpu
@requires_gpu
def test_device_info_agrees_with_torch() -> None:
    torch = _torch()
    assert xrt.get_device_count() == torch.cuda.device_count()
    for i in range(xrt.get_device_count()):
        ours = xrt.Device(i).info
        props = torch.cuda.get_device_properties(i)
        assert ours.device_type == "cuda"
        assert ours.name == props.name
        assert abs(ours.total_memory - props.total_memory) <= 0.01 * props.total_memory
        assert (ours.compute_capability_major, ours.compute_capability_minor) == (props.major, props.minor)
        assert ours.sm_count == props.multi_processor_count
        assert 0 < ours.free_memory <= ours.total_memory
        free_torch, _ = torch.cuda.mem_get_info(i)
        assert abs(ours.free_memory - free_torch) <= 0.05 * ours.total_memory
        assert ours.supports_bf16 == (props.major >= 8)
        if hasattr(props, "pci_bus_id"):
            domain, bus, rest = ours.pci_bus_id.split(":")
            device = rest.split(".")[0]
            assert int(bus, 16) == props.pci_bus_id
            assert int(device, 16) == props.pci_device_id
            assert int(domain, 16) == props.pci_domain_id
        assert ours.runtime_version.split(".")[0] == torch.version.cuda.split(".")[0]

        def version(v: str) -> tuple[int, ...]:
            return tuple(int(part) for part in v.split("."))

        assert version(ours.driver_version) >= version(ours.runtime_version)


# ---- DLPack ----------------------------------------------------------------------------


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int64", "uint8"])
def test_dlpack_from_torch_is_zero_copy_and_keeps_the_producer_alive(dtype: str) -> None:
    torch = _torch()
    tdtype = getattr(torch, dtype)
    src = (torch.rand(855, 37, device="cuda") * 200).to(tdtype)  # >= 0: uint8 too
    expected = src.float().cpu().numpy()
    ptr = src.data_ptr()
    ours = xrt.from_dlpack(src)
    assert ours.data_ptr == ptr
    assert ours.shape == (855, 37)
    assert ours.device == DEVICE
    assert ours.dtype == dtype
    del src
    gc.collect()
    torch.cuda.empty_cache()
    # Had the block gone back to torch, this would likely land on it and overwrite it.
    junk = torch.full((855 * 37 * 8,), 7, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    back = torch.from_dlpack(ours)  # read through torch: numpy lacks bfloat16
    assert back.data_ptr() == ptr
    np.testing.assert_array_equal(back.float().cpu().numpy(), expected)
    del junk


@pytest.mark.gpu
@requires_gpu
def test_dlpack_from_torch_keeps_strides_of_a_view() -> None:
    torch = _torch()
    base = torch.randn(64, 48, device="cuda")
    view = base.t()[5:, ::2]
    ours = xrt.from_dlpack(view)
    assert ours.data_ptr == view.data_ptr()
    assert ours.shape == tuple(view.shape)
    assert ours.strides == tuple(view.stride())
    np.testing.assert_array_equal(ours.numpy(), view.cpu().numpy())


@pytest.mark.gpu
@requires_gpu
def test_dlpack_to_torch_is_zero_copy_and_shares_writes() -> None:
    torch = _torch()
    ref = np.random.default_rng(3).standard_normal((1710, 3)).astype(np.float32)
    ours = _cuda_tensor_from(ref)
    t = torch.from_dlpack(ours)
    assert t.data_ptr() == ours.data_ptr
    assert t.device == torch.device("cuda", 0)
    np.testing.assert_array_equal(t.cpu().numpy(), ref)
    t.add_(1.0)  # a write through torch is visible to us: same memory
    torch.cuda.synchronize()
    np.testing.assert_array_equal(ours.numpy(), ref + 1.0)
    del ours
    gc.collect()
    np.testing.assert_array_equal(t.cpu().numpy(), ref + 1.0)


@pytest.mark.gpu
@requires_gpu
def test_dlpack_with_cupy_both_ways() -> None:
    cupy = _cupy()
    src = cupy.arange(12345, dtype=cupy.float64) * 0.5
    expected = cupy.asnumpy(src)
    ptr = src.data.ptr
    ours = xrt.from_dlpack(src)
    assert ours.data_ptr == ptr
    assert ours.dtype == "float64"
    del src
    gc.collect()
    cupy.get_default_memory_pool().free_all_blocks()
    np.testing.assert_array_equal(ours.numpy(), expected)
    back = cupy.from_dlpack(ours)
    assert back.data.ptr == ptr
    np.testing.assert_array_equal(cupy.asnumpy(back), expected)


# ---- caching allocator -------------------------------------------------------------------


@pytest.mark.gpu
@requires_gpu
def test_caching_allocator_reuses_blocks_and_counts_hits() -> None:
    mem = xrt.memory
    mem.empty_cache(DEVICE)  # no older cached block of this class competes with p1
    nbytes = 3 * 2**20 + 17
    block = _core.memory.round_size_class(nbytes)
    before = mem.memory_stats(DEVICE)
    p1 = mem.raw_alloc(nbytes, DEVICE)
    mem.raw_free(p1, DEVICE)
    p2 = mem.raw_alloc(nbytes, DEVICE)  # same size class, same (current) stream
    after = mem.memory_stats(DEVICE)
    assert p2 == p1
    assert after.num_allocs - before.num_allocs == 2
    assert after.num_cache_hits - before.num_cache_hits >= 1
    assert after.allocated_bytes - before.allocated_bytes == block
    assert after.requested_bytes - before.requested_bytes == nbytes
    mem.raw_free(p2, DEVICE)
    assert mem.memory_stats(DEVICE).allocated_bytes == before.allocated_bytes
    assert mem.memory_stats(DEVICE).peak_allocated_bytes >= block
    mem.empty_cache(DEVICE)
    stats = mem.memory_stats(DEVICE)
    assert stats.reserved_bytes == stats.allocated_bytes


@pytest.mark.gpu
@requires_gpu
def test_memory_limit_raises_out_of_memory_with_stats_then_recovers() -> None:
    mem = xrt.memory
    mem.empty_cache(DEVICE)
    base = mem.memory_stats(DEVICE).reserved_bytes
    mem.set_memory_limit(DEVICE, base + 64 * 2**20)
    try:
        p = mem.raw_alloc(48 * 2**20, DEVICE)
        with pytest.raises(xrt.OutOfMemoryError) as info:
            mem.raw_alloc(32 * 2**20, DEVICE)
        msg = str(info.value)
        assert "limit" in msg and "allocated" in msg and "reserved" in msg, msg
        assert isinstance(info.value, xrt.XpuRuntimeError)
        mem.raw_free(p, DEVICE)
        q = mem.raw_alloc(32 * 2**20, DEVICE)  # usable again once memory is free
        mem.raw_free(q, DEVICE)
    finally:
        mem.set_memory_limit(DEVICE, 0)
    assert mem.memory_stats(DEVICE).memory_limit == 0


@pytest.mark.gpu
@requires_gpu
def test_tensors_go_through_the_caching_allocator() -> None:
    mem = xrt.memory
    before = mem.memory_stats(DEVICE)
    t = xrt.Tensor.empty([1024, 1024], "float32", DEVICE)
    mid = mem.memory_stats(DEVICE)
    assert mid.num_allocs == before.num_allocs + 1
    assert mid.allocated_bytes - before.allocated_bytes == _core.memory.round_size_class(4 * 2**20)
    del t
    gc.collect()
    assert mem.memory_stats(DEVICE).allocated_bytes == before.allocated_bytes


# ---- streams and events --------------------------------------------------------------------


@pytest.mark.gpu
@requires_gpu
def test_events_time_known_work(kernels: _TestKernels) -> None:
    s = xrt.stream.create_stream(DEVICE)
    e0, e1, e2 = (xrt.Event(DEVICE) for _ in range(3))
    e0.record(s)
    kernels.spin(50.0, s.handle)
    e1.record(s)
    kernels.spin(10.0, s.handle)
    e2.record(s)
    assert not e2.query()
    e2.synchronize()
    assert e2.query() and s.query()
    t01, t12, t02 = e1.elapsed_time(e0), e2.elapsed_time(e1), e2.elapsed_time(e0)
    assert 49.0 <= t01 < 200.0
    assert 9.0 <= t12 < 100.0
    assert t02 == pytest.approx(t01 + t12, abs=0.5)


@pytest.mark.gpu
@requires_gpu
def test_event_wait_orders_two_streams(kernels: _TestKernels) -> None:
    rng = np.random.default_rng(7)
    x = rng.integers(-100, 100, 4099).astype(np.float32)
    y = rng.integers(-100, 100, 4099).astype(np.float32)
    dx, dy = _cuda_tensor_from(x), _cuda_tensor_from(y)
    xrt.synchronize(0)
    s1, s2 = xrt.stream.create_stream(DEVICE), xrt.stream.create_stream(DEVICE)
    kernels.spin(50.0, s1.handle)
    kernels.axpy(3.0, dx.data_ptr, dy.data_ptr, x.size, s1.handle)
    done = xrt.Event(DEVICE, enable_timing=False)
    done.record(s1)
    done.wait(s2)
    kernels.axpy(1.0, dx.data_ptr, dy.data_ptr, x.size, s2.handle)  # runs after s1's axpy
    s2.synchronize()
    np.testing.assert_array_equal(dy.numpy(), 4.0 * x + y)


# ---- CUDA graphs ---------------------------------------------------------------------------


@pytest.mark.gpu
@requires_gpu
def test_captured_graph_replays_with_the_right_result(kernels: _TestKernels) -> None:
    n = 100_003  # odd: the kernel's tail runs
    rng = np.random.default_rng(11)
    y0 = rng.integers(-1000, 1000, n).astype(np.float32)  # small integers: exact sums
    src = _cuda_tensor_from(np.zeros(n, np.float32))  # the graph's input, refilled per replay
    x = xrt.Tensor.empty([n], "float32", DEVICE)
    y = _cuda_tensor_from(y0)
    s = xrt.stream.create_stream(DEVICE)
    xrt.synchronize(0)
    with xrt.stream.capture_graph(s) as graph:  # s is the current stream inside
        assert xrt.stream.current_stream(DEVICE).handle == s.handle
        x.copy_(src)  # a device-to-device copy node
        kernels.axpy(2.0, x.data_ptr, y.data_ptr, n, s.handle)  # a kernel node: y += 2x
    np.testing.assert_array_equal(y.numpy(), y0)  # capture records work, it does not run it
    expected = y0.astype(np.float64)
    for replay in range(3):
        xs = rng.integers(-1000, 1000, n).astype(np.float32)
        src.copy_(xs)
        xrt.synchronize(0)
        graph.replay()
        s.synchronize()
        expected = expected + 2.0 * xs
        np.testing.assert_array_equal(y.numpy(), expected.astype(np.float32), err_msg=f"replay {replay}")


@pytest.mark.gpu
@requires_gpu
def test_capture_on_the_default_stream_is_rejected() -> None:
    with pytest.raises(xrt.InvalidArgumentError), xrt.stream.capture_graph(xrt.stream.default_stream(DEVICE)):
        pass
