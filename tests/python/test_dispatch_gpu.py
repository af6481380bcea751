"""Dispatcher on a CUDA device: best_performance tunes cuBLAS against cuBLASLt (and
cuBLASLt's algorithms) with CUDA events, caches the winner, exports it as a pin, and
the pinned policy repeats the choice and the bits. Skips without a CUDA device."""

from __future__ import annotations

import numpy as np
import pytest
import xpuruntime as xrt
from xpuruntime import KernelPolicy

pytestmark = pytest.mark.gpu


def _need_cuda_matmul():
    if xrt.get_device_count() == 0:
        pytest.skip(f"no CUDA device: {xrt._core.DeviceManager.instance().cuda_unavailable_reason()}")
    names = {k.name for k in xrt.kernels.list_kernels("matmul", "cuda")}
    if not {"cublas", "cublasLt"} <= names:
        pytest.skip(f"CUDA matmul kernels not registered (have {sorted(names)})")


def _dev(x: np.ndarray):
    return xrt.Tensor.from_numpy(np.ascontiguousarray(x)).to("cuda:0")


def test_best_performance_tunes_with_cuda_events_and_pins_repeat_bits(tmp_path):
    _need_cuda_matmul()
    rng = np.random.default_rng(0)
    m, k, n = 256, 1024, 512
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    d = xrt._core.Dispatcher.instance()
    d.clear_tuning_cache()
    d.set_tuning_options(warmup=2, iterations=10)
    pol = KernelPolicy(auto_strategy="best_performance")
    c = xrt.Tensor.empty([m, n], "float16", "cuda:0")
    _, dec = xrt.dispatch.dispatch("matmul", [_dev(a), _dev(b)], [c], policy=pol, node="tuned")
    xrt.synchronize()
    assert dec.rule == "auto.best_performance"
    assert dec.chosen in ("cublas", "cublasLt")
    assert any(key.startswith("cublasLt/") for key in dec.timings), dec.timings  # algorithms timed
    assert "cublas" in dec.timings
    assert all(t > 0 for t in dec.timings.values())
    assert dec.pin == {"kernel": dec.chosen, "algorithm": dec.algorithm}
    got = np.asarray(c.to("cpu")).astype(np.float64)
    # fp16 output of a K=1024 product: relative error of a few fp16 ulps of the row norm.
    np.testing.assert_allclose(got, ref, rtol=2e-2, atol=2e-1)

    pinned = xrt.dispatch.export_pins(pol)
    assert dec.key in pinned.pins
    path = tmp_path / "pins.json"
    pinned.save(path)
    prod = KernelPolicy.load(path)
    c2 = xrt.Tensor.empty([m, n], "float16", "cuda:0")
    _, dec2 = xrt.dispatch.dispatch("matmul", [_dev(a), _dev(b)], [c2], policy=prod, node="prod")
    xrt.synchronize()
    assert (dec2.rule, dec2.chosen, dec2.algorithm) == ("pinned", dec.chosen, dec.algorithm)
    np.testing.assert_array_equal(np.asarray(c2.to("cpu")), np.asarray(c.to("cpu")))  # same bits


def test_require_on_gpu_and_capability_reasons():
    _need_cuda_matmul()
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 96)).astype(np.float32)
    b = rng.standard_normal((96, 32)).astype(np.float32)
    c = xrt.Tensor.empty([64, 32], "float32", "cuda:0")
    _, dec = xrt.dispatch.dispatch(
        "matmul", [_dev(a), _dev(b)], [c], policy=KernelPolicy(matmul="cublas", mode="require")
    )
    assert (dec.chosen, dec.rule) == ("cublas", "policy.require")
    assert dec.candidate("cpu_blas") is None or dec.candidate("cpu_blas").reason_code == "not_in_policy"
    np.testing.assert_allclose(np.asarray(c.to("cpu")), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
