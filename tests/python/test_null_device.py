"""The null device (cpp/src/backends/null/): a third device kind of the plugin table,
with host memory, streams that run in order and the CPU's kernels, served by the one
execution provider. The native engine runs a model on it like on the CPU (same
kernels, same bits) while every input and output crosses the plan's edge through the
null backend's copies; Python reads the kind from ``_core`` like any other.

It is off unless XRT_NULL_DEVICE=1 (users listing devices see only real ones); these
tests turn it on for themselves.
"""

from __future__ import annotations

import numpy as np
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper
from xpuruntime.engines.base import EngineOptions
from xpuruntime.engines.native import engine as native_engine


@pytest.fixture()
def null_on(monkeypatch: pytest.MonkeyPatch) -> None:
    if "null" not in xrt._core.device_kinds():
        pytest.skip("this build's plugin table has no null device")
    monkeypatch.setenv("XRT_NULL_DEVICE", "1")


def _model(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((8, 5)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal((5,)).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["pre"]),
        helper.make_node("Relu", ["pre"], ["h"]),
        helper.make_node("Softmax", ["h"], ["y"], axis=-1),
    ]
    g = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5])],
        initializer=[w, b],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _reference(model: bytes, x: np.ndarray) -> np.ndarray:
    import onnx

    graph = onnx.load_from_string(model).graph
    init = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in graph.initializer}
    h = np.maximum(x.astype(np.float64) @ init["w"] + init["b"], 0.0)
    e = np.exp(h - h.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_the_null_kind_comes_from_the_core(null_on: None) -> None:
    assert "null" in xrt.runtime.device.device_kinds()
    assert str(xrt._core.DeviceSpec("null:0")) == "null:0"
    assert xrt.runtime.device.unavailable_reason("null") == ""
    assert "null" in native_engine.devices()
    assert xrt.runtime.device.device_attribute("null:0", "capability") == ""


def test_the_native_engine_runs_on_the_null_device_like_on_the_cpu(null_on: None) -> None:
    model = _model(3)
    x = np.random.default_rng(4).standard_normal((4, 8), dtype=np.float32)
    on_null = native_engine.NativeEngine(model, EngineOptions("null"))
    on_cpu = native_engine.NativeEngine(model, EngineOptions("cpu"))
    got = on_null.run({"x": x})["y"]
    want = on_cpu.run({"x": x})["y"]
    np.testing.assert_array_equal(got, want)  # the same CPU kernels: the same bits
    np.testing.assert_allclose(got, _reference(model, x), rtol=1e-5, atol=1e-6)
    assert on_null.device.startswith("null")


def test_the_null_device_is_off_unless_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    if "null" not in xrt._core.device_kinds():
        pytest.skip("this build's plugin table has no null device")
    monkeypatch.delenv("XRT_NULL_DEVICE", raising=False)
    assert "XRT_NULL_DEVICE=1" in xrt.runtime.device.unavailable_reason("null")
    assert "null" not in native_engine.devices()
    with pytest.raises(xrt.BackendUnavailableError, match="XRT_NULL_DEVICE=1"):
        native_engine.NativeEngine(_model(5), EngineOptions("null"))
