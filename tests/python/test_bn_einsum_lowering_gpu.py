"""On CUDA: the BatchNormalization-into-MatMul fold and the broadcast Einsum lowering
(issue 36) give plans CUDA's kernels run (no BatchNormalization or Einsum step left; CUDA
has no Einsum kernel), matching NumPy float64 in fp32 and fp16. Skips without a CUDA device."""

from __future__ import annotations

import numpy as np
import pytest
import xpuruntime as xrt
from test_cpu_bn_matmul_fold import _levit
from test_einsum_lowering import _model as _einsum_model

pytestmark = pytest.mark.gpu

TOL = {"fp32": 1e-3, "fp16": 3e-2}  # fp32 allows TF32 GEMMs


def _need_cuda():
    if xrt.get_device_count() == 0:
        pytest.skip(f"no CUDA device: {xrt._core.DeviceManager.instance().cuda_unavailable_reason()}")


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_levit_bn_fold_runs_on_cuda(precision):
    _need_cuda()
    model, ref = _levit(2, 49, 64, 96, with_bias=True)
    x = np.random.default_rng(1).standard_normal((2, 49, 64)).astype(np.float32)
    sess = xrt.InferenceSession(
        model, device="cuda", engine="native", exec_policy=xrt.ExecutionPolicy(precision=precision)
    )
    y = np.asarray(next(iter(sess.run({"x": x}).values())), dtype=np.float64)
    assert "BatchNormalization" not in [s["op_type"] for s in sess.plan.steps]
    r = ref(x)
    np.testing.assert_allclose(y, r, rtol=TOL[precision], atol=TOL[precision] * float(np.abs(r).max()))


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_broadcast_5d_einsum_runs_on_cuda(precision):
    _need_cuda()
    eq, sa, sb = "bghid,bghjd->bghij", (2, 1, 3, 16, 32), (2, 4, 3, 24, 32)
    rng = np.random.default_rng(2)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    ref = np.einsum(eq, a.astype(np.float64), b.astype(np.float64))
    sess = xrt.InferenceSession(
        _einsum_model(eq, sa, sb, list(ref.shape)),
        device="cuda",
        engine="native",
        exec_policy=xrt.ExecutionPolicy(precision=precision),
    )
    y = np.asarray(next(iter(sess.run({"a": a, "b": b}).values())), dtype=np.float64)
    assert "Einsum" not in [s["op_type"] for s in sess.plan.steps]
    np.testing.assert_allclose(y, ref, rtol=TOL[precision], atol=TOL[precision] * float(np.abs(ref).max()))
