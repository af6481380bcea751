"""QNN adapter through onnxruntime-qnn: what the wheel carries, the HTP backend (on
x86_64 Qualcomm's simulator) running int8 and fp16 models, and the policy checks."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import xpuruntime as xrt
from engine_testlib import build, exec_policy, quantize_qdq, tiny_mlp, tiny_mlp_reference
from onnx import TensorProto, helper
from xpuruntime.engines import registry

qnn_pkg = pytest.importorskip(
    "onnxruntime_qnn", reason="onnxruntime-qnn is not installed (pip install xpuruntime[qnn])"
)
AV = registry.availability("qnn")
needs_htp = pytest.mark.skipif("npu" not in AV.devices, reason=f"no QNN HTP backend here: {AV.reason}")
INT8 = {"precision": "int8", "static_shape": True}


def test_availability_says_exactly_what_the_wheel_holds() -> None:
    libs = {
        name: os.path.isfile(path)
        for name, path in (
            ("htp", qnn_pkg.get_qnn_htp_path()),
            ("cpu", qnn_pkg.get_qnn_cpu_path()),
            ("gpu", qnn_pkg.get_qnn_gpu_path()),
        )
    }
    assert AV.available == (libs["htp"] or libs["cpu"])
    assert ("npu" in AV.devices) == libs["htp"]
    assert ("cpu" in AV.devices) == libs["cpu"]
    if not libs["cpu"]:
        assert "no libQnnCpu.so" in AV.reason
    if libs["htp"] and platform.machine().lower() not in ("aarch64", "arm64"):
        assert AV.simulated == ("npu",) and "simulator" in AV.reason


@pytest.fixture(scope="module")
def qdq_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    model = tiny_mlp(batch=4)
    return model, quantize_qdq(model, "x", (4, 16), tmp_path_factory.mktemp("qdq"))


@needs_htp
def test_int8_qdq_model_runs_on_htp(qdq_model: tuple[onnx.ModelProto, onnx.ModelProto]) -> None:
    model, qdq = qdq_model
    eng = build("qnn", qdq, device="npu", policy=exec_policy(**INT8))
    assert eng.effective_options["providers"][0] == "QNNExecutionProvider"
    assert eng.effective_options["provider_options"]["QNNExecutionProvider"]["backend_type"] == "htp"
    on_qnn = [
        d.op for d in eng.decisions() if d.rule == "engine.placement" and d.chosen == "QNNExecutionProvider"
    ]
    assert "MatMul" in on_qnn
    x = np.random.default_rng(21).standard_normal((4, 16)).astype(np.float32)
    y = eng.run({"x": x})["y"]
    # Same quantized model on ORT's CPU provider: QNN must agree to about one
    # quantization step of the output (scale = range / 255).
    cpu = ort.InferenceSession(qdq.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )[0]
    step = (cpu.max() - cpu.min()) / 255
    assert np.abs(y - cpu).max() <= 2.5 * step
    ref = tiny_mlp_reference(model, x)
    assert np.abs(y - ref).max() < 0.08 * np.abs(ref).max()


@needs_htp
def test_fp16_float_model_runs_on_htp() -> None:
    model = tiny_mlp(batch=2)
    eng = build("qnn", model, device="npu", policy=exec_policy(precision="fp16", static_shape=True))
    opts = eng.effective_options["provider_options"]["QNNExecutionProvider"]
    assert opts["enable_htp_fp16_precision"] == "1" and opts["soc_model"]
    x = np.random.default_rng(4).standard_normal((2, 16)).astype(np.float32)
    ref = tiny_mlp_reference(model, x)
    y = eng.run({"x": x})["y"]
    assert np.abs(y - ref).max() < 2e-2 * np.abs(ref).max()  # fp16 accumulation


@needs_htp
def test_policy_requirements_are_enforced(qdq_model: tuple[onnx.ModelProto, onnx.ModelProto]) -> None:
    model, qdq = qdq_model
    with pytest.raises(xrt.UnsupportedOperationError, match="int8.*or fp16, not fp32"):
        build("qnn", qdq, device="npu", policy=exec_policy(precision="fp32", static_shape=True))
    with pytest.raises(xrt.UnsupportedOperationError, match="static_shape=True"):
        build("qnn", qdq, device="npu", policy=exec_policy(precision="int8"))
    with pytest.raises(xrt.UnsupportedOperationError, match="QDQ"):
        build("qnn", model, device="npu", policy=exec_policy(**INT8))
    with pytest.raises(xrt.PolicyError, match="input_shapes"):
        build("qnn", tiny_mlp(), device="npu", policy=exec_policy(precision="fp16", static_shape=True))
    eng = build(
        "qnn",
        tiny_mlp(),
        device="npu",
        policy=exec_policy(precision="fp16", static_shape=True),
        input_shapes={"x": [3, 16]},
    )
    assert eng.run({"x": np.ones((3, 16), np.float32)})["y"].shape == (3, 8)


def _model_with_erf() -> onnx.ModelProto:
    """Relu then Erf: QNN's HTP backend takes Relu, not Erf."""
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Erf", ["r"], ["y"], name="erf"),
        ],
        "erf",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@needs_htp
def test_cpu_fallback_of_nodes_only_when_allowed() -> None:
    model = _model_with_erf()
    policy = {"precision": "fp16", "static_shape": True}
    with pytest.raises(xrt.UnsupportedOperationError, match=r"erf \(Erf\).*allow_fallback='cpu'"):
        build("qnn", model, device="npu", policy=exec_policy(**policy))
    eng = build("qnn", model, device="npu", policy=exec_policy(**policy, allow_fallback="cpu"))
    rules = {d.node: (d.chosen, d.rule) for d in eng.decisions() if d.op in ("Relu", "Erf")}
    assert rules == {
        "relu": ("QNNExecutionProvider", "engine.placement"),
        "erf": ("CPUExecutionProvider", "fallback"),
    }
    from math import erf

    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    ref = np.vectorize(erf)(np.maximum(x, 0).astype(np.float64))
    assert np.abs(eng.run({"x": x})["y"] - ref).max() < 2e-3


@needs_htp
def test_strict_no_cpu_fallback(qdq_model: tuple[onnx.ModelProto, onnx.ModelProto]) -> None:
    _, qdq = qdq_model
    # With CPU fallback disabled, QNN takes the QDQ model's host-side Quantize/Dequantize too.
    eng = build("qnn", qdq, device="npu", policy=exec_policy(**INT8, strict=["no_cpu_fallback"]))
    placed = {d.chosen for d in eng.decisions() if d.rule in ("engine.placement", "fallback")}
    assert placed == {"QNNExecutionProvider"}
    # Erf has no QNN kernel: the build fails, naming the assertion.
    with pytest.raises(xrt.UnsupportedOperationError, match="no_cpu_fallback"):
        policy = exec_policy(precision="fp16", static_shape=True, strict=["no_cpu_fallback"])
        build("qnn", _model_with_erf(), device="npu", policy=policy)


def test_allow_fallback_with_strict_no_cpu_fallback_is_refused() -> None:
    # contradictory: refused by the policy itself, or at the latest by the build
    with pytest.raises(xrt.XpuRuntimeError, match="no_cpu_fallback"):
        policy = exec_policy(
            precision="fp16", static_shape=True, allow_fallback="cpu", strict=["no_cpu_fallback"]
        )
        build("qnn", _model_with_erf(), device="npu", policy=policy)


def test_cpu_backend_absence_is_explained(tmp_path: Path) -> None:
    if "cpu" in AV.devices:
        pytest.skip("this onnxruntime-qnn carries the QNN CPU backend")
    with pytest.raises(xrt.BackendUnavailableError, match="qnn@cpu: device_unavailable.*libQnnCpu.so"):
        registry.select_engine("qnn", "cpu", exec_policy(static_shape=True))
