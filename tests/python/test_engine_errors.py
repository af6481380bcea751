"""Bad input to the native engine raises typed errors with useful messages, never crashes."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper
from xpuruntime.models import demo_model_path


@pytest.fixture(autouse=True, scope="module")
def _free_sessions_after_module():  # type: ignore[no-untyped-def]
    """Frees this module's sessions (and their arenas) before other modules run, so
    allocator-statistics tests elsewhere never see them released mid-test."""
    yield
    gc.collect()


DEMO = demo_model_path()


def model(nodes, inputs, outputs, inits=(), opset: int = 17, check: bool = True):  # type: ignore[no-untyped-def]
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    if check:
        onnx.checker.check_model(m)
    return m


def fvi(name: str, shape):  # type: ignore[no-untyped-def]
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_truncated_model_file(tmp_path: Path) -> None:
    data = DEMO.read_bytes()
    for cut in (7, 100, len(data) // 3, len(data) - 1):
        p = tmp_path / f"cut{cut}.onnx"
        p.write_bytes(data[:cut])
        with pytest.raises(xrt.InvalidModelError, match=str(p.name)):
            xrt.InferenceSession(str(p), device="cpu")


def test_corrupt_model_bytes() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(xrt.InvalidModelError, match="not a valid ONNX model"):
        xrt.InferenceSession(rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(), device="cpu")
    with pytest.raises(xrt.InvalidModelError, match="does not exist"):
        xrt.InferenceSession("/nonexistent/model.onnx", device="cpu")
    with pytest.raises(xrt.InvalidModelError, match="must be a path, bytes"):
        xrt.InferenceSession(12345, device="cpu")


def test_unknown_op_names_node_and_op() -> None:
    m = model(
        [helper.make_node("FrobnicateAll", ["x"], ["y"], name="mystery")],
        [fvi("x", [2])],
        [fvi("y", [2])],
        check=False,
    )
    with pytest.raises(xrt.UnsupportedOperationError, match="mystery.*FrobnicateAll"):
        xrt.InferenceSession(m, device="cpu")


def test_onnx_op_without_a_cpu_kernel_names_node_and_op() -> None:
    m = model([helper.make_node("Det", ["x"], ["y"], name="determinant")], [fvi("x", [3, 3])], [fvi("y", [])])
    # Named explicitly: the native engine's error (with engine="auto" the next engine takes
    # the model and the native candidate is recorded as rejected: test_native_io.py).
    with pytest.raises(xrt.UnsupportedOperationError, match="determinant.*Det.*not supported"):
        xrt.InferenceSession(m, device="cpu", engine="native")


def test_graph_cycle() -> None:
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
        helper.make_node("Identity", ["a"], ["y"], name="out"),
    ]
    m = model(nodes, [fvi("x", [2])], [fvi("y", [2])], check=False)
    with pytest.raises(xrt.InvalidModelError, match="cycle.*first.*second|cycle.*second.*first"):
        xrt.InferenceSession(m, device="cpu")


def test_missing_initializer() -> None:
    m = model(
        [helper.make_node("MatMul", ["x", "weights"], ["y"], name="fc")],
        [fvi("x", [2, 3])],
        [fvi("y", [2, 4])],
        check=False,
    )
    with pytest.raises(xrt.InvalidModelError, match="'fc'.*'weights'.*missing initializer"):
        xrt.InferenceSession(m, device="cpu")


def test_inconsistent_shapes_name_the_node() -> None:
    w = numpy_helper.from_array(np.ones((5, 4), np.float32), "w")
    m = model(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")],
        [fvi("x", [2, 3])],
        [fvi("y", [2, 4])],
        [w],
        check=False,
    )
    with pytest.raises(xrt.XpuRuntimeError, match="fc"):
        xrt.InferenceSession(m, device="cpu")


class TestRunInputs:
    sess = None

    @classmethod
    def setup_class(cls) -> None:
        cls.sess = xrt.InferenceSession(str(DEMO), device="cpu", input_shapes={"image": [1, 3, 32, 32]})

    def x(self, shape=(1, 3, 32, 32), dtype=np.float32):  # type: ignore[no-untyped-def]
        return np.zeros(shape, dtype)

    def test_wrong_input_name_lists_expected(self) -> None:
        with pytest.raises(xrt.InvalidArgumentError, match="unknown input name 'img'.*image: float32"):
            self.sess.run({"img": self.x()})

    def test_missing_input(self) -> None:
        with pytest.raises(xrt.InvalidArgumentError, match="missing input 'image'.*float32"):
            self.sess.run({})

    def test_wrong_dtype(self) -> None:
        with pytest.raises(xrt.InvalidArgumentError, match="dtype float64 but the model expects float32"):
            self.sess.run({"image": self.x(dtype=np.float64)})

    def test_wrong_rank(self) -> None:
        with pytest.raises(xrt.InvalidArgumentError, match="rank 3.*expects float32\\[batch, 3, 32, 32\\]"):
            self.sess.run({"image": self.x((3, 32, 32))})

    def test_wrong_shape(self) -> None:
        with pytest.raises(xrt.InvalidArgumentError, match="dimension 2 must be 32"):
            self.sess.run({"image": self.x((1, 3, 16, 32))})

    def test_unknown_output_name(self) -> None:
        with pytest.raises(xrt.InvalidArgumentError, match="unknown output name 'probs'.*logits"):
            self.sess.run({"image": self.x()}, output_names=["probs"])

    def test_not_a_dict(self) -> None:
        with pytest.raises(xrt.InvalidArgumentError, match="dict"):
            self.sess.run([self.x()])  # type: ignore[arg-type]

    def test_session_still_works_after_errors(self) -> None:
        assert self.sess.run({"image": self.x()})["logits"].shape == (1, 10)


def test_symbolic_dims_must_agree_across_inputs() -> None:
    m = model(
        [helper.make_node("Add", ["a", "b"], ["y"], name="add")],
        [fvi("a", ["n", 2]), fvi("b", ["n", 2])],
        [fvi("y", ["n", 2])],
    )
    sess = xrt.InferenceSession(m, device="cpu")
    with pytest.raises(xrt.XpuRuntimeError):
        sess.run({"a": np.zeros((2, 2), np.float32), "b": np.zeros((3, 2), np.float32)})


def test_out_of_range_gather_index_is_an_error() -> None:
    data = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "data")
    m = model(
        [helper.make_node("Gather", ["data", "idx"], ["y"], name="lookup", axis=0)],
        [helper.make_tensor_value_info("idx", TensorProto.INT64, [2])],
        [fvi("y", [2, 3])],
        [data],
    )
    sess = xrt.InferenceSession(m, device="cpu")
    np.testing.assert_array_equal(sess.run({"idx": np.array([3, -4])})["y"], [[9, 10, 11], [0, 1, 2]])
    with pytest.raises(xrt.InvalidArgumentError, match="lookup.*index 7 is out of range"):
        sess.run({"idx": np.array([0, 7])})


def test_other_engines_and_devices_report_clearly() -> None:
    with pytest.raises((xrt.BackendUnavailableError, xrt.UnsupportedOperationError)):
        xrt.InferenceSession(str(DEMO), device="cuda:0", engine="native")
    with pytest.raises(xrt.InvalidArgumentError, match="unknown engine 'warpdrive'"):
        xrt.InferenceSession(str(DEMO), device="cpu", engine="warpdrive")
    with pytest.raises(xrt.InvalidArgumentError, match="disagree"):
        xrt.InferenceSession(str(DEMO), device="cpu", engine="native", backend="onnxruntime")


def test_huge_tensor_request_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XRT_MAX_TENSOR_BYTES", str(1 << 20))
    shape = numpy_helper.from_array(np.array([1024, 1024], np.int64), "shape")
    m = model(
        [helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")],
        [helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
        [fvi("y", ["a", "b"])],
    )
    del shape
    sess = xrt.InferenceSession(m, device="cpu")
    with pytest.raises(xrt.XpuRuntimeError, match="above the limit"):
        sess.run({"s": np.array([1024, 1024], np.int64)})
