"""The native engine's run() with caller buffers, streams and precisions, on the CPU
(issue 15; the CUDA side is tests/gpu/test_native_cuda_io_gpu.py and
tests/gpu/test_native_cuda_zoo_gpu.py).

Caller output buffers are written in place by the kernels and returned; a stream or a
device tensor on the CPU, fp16/bf16 plans on the CPU, buffers of the wrong count, dtype or
shape, and outputs= on another engine are typed errors saying what to do.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper


def _model() -> bytes:
    rng = np.random.default_rng(11)
    w = numpy_helper.from_array((rng.standard_normal((8, 4)) * 0.5).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])]
    g = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        initializer=[w],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _reference(x: np.ndarray) -> np.ndarray:
    w = onnx.numpy_helper.to_array(onnx.load_from_string(_model()).graph.initializer[0]).astype(np.float64)
    return np.tanh(x.astype(np.float64) @ w)


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((3, 8), dtype=np.float32)


def test_a_caller_buffer_is_written_in_place_and_returned() -> None:
    sess = xrt.InferenceSession(_model(), engine="native", device="cpu")
    buf = np.full((3, 4), np.nan, np.float32)
    out = sess.run({"x": _x(0)}, outputs=[buf])
    assert out["y"] is buf
    np.testing.assert_allclose(buf, _reference(_x(0)), rtol=1e-5, atol=1e-6)
    # The same buffer again, new inputs: overwritten.
    sess.run({"x": _x(1)}, outputs=[buf])
    np.testing.assert_allclose(buf, _reference(_x(1)), rtol=1e-5, atol=1e-6)


def test_buffers_of_the_wrong_count_dtype_or_shape_are_refused() -> None:
    sess = xrt.InferenceSession(_model(), engine="native", device="cpu")
    with pytest.raises(xrt.InvalidArgumentError, match="output buffers"):
        sess.run({"x": _x(0)}, outputs=[np.empty((3, 4), np.float32)] * 2)
    with pytest.raises(xrt.InvalidArgumentError, match="dtype"):
        sess.run({"x": _x(0)}, outputs=[np.empty((3, 4), np.float64)])
    with pytest.raises(xrt.InvalidArgumentError, match="shape"):
        sess.run({"x": _x(0)}, outputs=[np.empty((4, 3), np.float32)])
    # Nothing was corrupted: a plain run still matches.
    np.testing.assert_allclose(sess.run({"x": _x(2)})["y"], _reference(_x(2)), rtol=1e-5, atol=1e-6)


def test_a_stream_on_the_cpu_is_a_typed_error() -> None:
    sess = xrt.InferenceSession(_model(), engine="native", device="cpu")
    with pytest.raises(xrt.UnsupportedOperationError, match="stream"):
        sess.run({"x": _x(0)}, stream=12345)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_half_precision_on_the_cpu_is_refused_naming_cuda(precision: str) -> None:
    with pytest.raises(xrt.XpuRuntimeError, match="cuda"):
        xrt.InferenceSession(
            _model(), engine="native", device="cpu", exec_policy=xrt.ExecutionPolicy(precision=precision)
        )


def test_outputs_on_another_engine_are_refused() -> None:
    pytest.importorskip("onnxruntime")
    sess = xrt.InferenceSession(_model(), engine="onnxruntime", device="cpu")
    with pytest.raises(xrt.UnsupportedOperationError, match="native"):
        sess.run({"x": _x(0)}, outputs=[np.empty((3, 4), np.float32)])


def test_cuda_graph_on_the_cpu_runs_step_by_step() -> None:
    sess = xrt.InferenceSession(
        _model(), engine="native", device="cpu", exec_policy=xrt.ExecutionPolicy(cuda_graph=True)
    )
    np.testing.assert_allclose(sess.run({"x": _x(3)})["y"], _reference(_x(3)), rtol=1e-5, atol=1e-6)
    assert sess._engine.graph_status().startswith("off")


def test_auto_engine_passes_a_model_native_cannot_build_to_the_next_engine() -> None:
    pytest.importorskip("onnxruntime")
    # Hardmax: an op the native engine has no kernel for (ONNX Runtime has one).
    nodes = [helper.make_node("Hardmax", ["a"], ["c"], axis=-1)]
    g = helper.make_graph(
        nodes,
        "h",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 3])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    sess = xrt.InferenceSession(m.SerializeToString(), device="cpu")
    assert sess.engine == "onnxruntime"
    (decision,) = [d for d in sess.explain() if d.op == "engine"]
    native = [c for c in decision.candidates if c.kernel.startswith("native@")]
    assert native and native[0].verdict == "rejected" and native[0].reason_code == "op_unsupported"
    assert "Hardmax" in native[0].detail
    a = np.random.default_rng().standard_normal((2, 3), dtype=np.float32)
    want = (a == a.max(axis=-1, keepdims=True)).astype(np.float32)
    np.testing.assert_array_equal(sess.run({"a": a})["c"], want)
    # Named explicitly, the native engine's error stands.
    with pytest.raises(xrt.UnsupportedOperationError, match="Hardmax"):
        xrt.InferenceSession(m.SerializeToString(), device="cpu", engine="native")
