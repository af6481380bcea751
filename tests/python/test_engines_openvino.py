"""OpenVINO adapter on the CPU: correctness against independent references, policy
mappings read back from the compiled model, NPU fallback, int8, zero-copy, errors."""

from __future__ import annotations

import threading
from pathlib import Path

import model_zoo
import numpy as np
import pytest
import xpuruntime as xrt
from engine_testlib import assert_close_to, build, exec_policy, quantize_qdq, tiny_mlp, tiny_mlp_reference
from xpuruntime.engines import registry

pytestmark = pytest.mark.skipif(
    not registry.availability("openvino").available, reason="openvino not installed"
)


def _cpu_caps() -> list[str]:
    return list(
        registry.get_engine_class("openvino")._core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    )


def test_tiny_mlp_matches_float64_reference() -> None:
    model = tiny_mlp()
    eng = build("openvino", model)
    for batch in (1, 4, 17):  # dynamic batch: one compiled model, several shapes
        x = np.random.default_rng(batch).standard_normal((batch, 16)).astype(np.float32)
        assert_close_to(
            eng.run({"x": x})["y"],
            tiny_mlp_reference(model, x),
            f"ov tiny_mlp batch {batch}",
            rtol=1e-5,
            atol_fraction=1e-5,
        )


@pytest.mark.parametrize("name", model_zoo.MODELS)
def test_zoo_models_match_pytorch(name: str) -> None:
    path = model_zoo.export(name)
    eng = build("openvino", path)
    feeds = model_zoo.sample_inputs(name, np.random.default_rng(8), batch=2)
    ref = model_zoo.torch_reference(name, feeds)
    out = eng.run(feeds)
    for key, value in ref.items():
        assert_close_to(out[key], value, f"openvino {name}:{key} vs torch")
    if registry.availability("native").available:
        native = build("native", path).run(feeds)
        for key in ref:
            assert_close_to(out[key], native[key], f"openvino {name}:{key} vs native")


def test_policy_mappings_are_read_back_from_the_compiled_model() -> None:
    eng = build(
        "openvino", tiny_mlp(), policy=exec_policy(threads=1, precision="fp32"), performance_hint="THROUGHPUT"
    )
    cm = eng.compiled_model
    assert (
        str(cm.get_property("INFERENCE_PRECISION_HINT")) in ("<Type: 'float32'>", "f32")
        or cm.get_property("INFERENCE_PRECISION_HINT").get_type_name() == "f32"
    )
    assert cm.get_property("INFERENCE_NUM_THREADS") == 1
    assert str(cm.get_property("PERFORMANCE_HINT")).endswith("THROUGHPUT")
    by_node = {d.node: d for d in eng.decisions() if d.op == "engine.policy"}
    assert by_node["openvino:precision"].chosen == "INFERENCE_PRECISION_HINT=f32"
    assert "read back: INFERENCE_PRECISION_HINT=f32" in by_node["openvino:precision"].detail
    assert by_node["openvino:threads"].chosen == "INFERENCE_NUM_THREADS=1"
    assert "read back: INFERENCE_NUM_THREADS=1" in by_node["openvino:threads"].detail
    assert by_node["openvino:performance_hint"].chosen == "PERFORMANCE_HINT=THROUGHPUT"


def test_runtime_layers_are_recorded() -> None:
    eng = build("openvino", tiny_mlp())
    placed = [d for d in eng.decisions() if d.rule == "engine.placement"]
    assert placed and all(d.chosen.startswith("CPU/") for d in placed)
    assert any("mm1" in d.node for d in placed)  # original ONNX names are kept


def test_fp16_where_the_cpu_cannot_is_refused() -> None:
    if "FP16" in _cpu_caps():
        eng = build("openvino", tiny_mlp(), policy=exec_policy(precision="fp16"))
        assert eng.effective_options["INFERENCE_PRECISION_HINT"] == "f16"
        return
    with pytest.raises(
        xrt.UnsupportedOperationError, match="openvino@cpu: dtype_unsupported.*silently run f32"
    ):
        registry.select_engine("openvino", "cpu", exec_policy(precision="fp16"))


@pytest.mark.skipif(
    "npu" in registry.availability("openvino").devices, reason="this machine has an OpenVINO NPU"
)
def test_npu_falls_back_to_cpu_only_when_allowed() -> None:
    model = tiny_mlp()
    with pytest.raises(xrt.BackendUnavailableError, match="openvino@npu"):
        build("openvino", model, device="npu", policy=exec_policy())
    eng = build("openvino", model, device="npu", policy=exec_policy(allow_fallback="cpu"))
    x = np.random.default_rng(2).standard_normal((2, 16)).astype(np.float32)
    assert_close_to(
        eng.run({"x": x})["y"],
        tiny_mlp_reference(model, x),
        "ov npu→cpu fallback",
        rtol=1e-5,
        atol_fraction=1e-5,
    )
    assert eng.effective_options["EXECUTION_DEVICES"] == ["CPU"]


def test_static_shape_reshapes_the_model() -> None:
    with pytest.raises(xrt.PolicyError, match="input_shapes"):
        build("openvino", tiny_mlp(), policy=exec_policy(static_shape=True))
    eng = build("openvino", tiny_mlp(), policy=exec_policy(static_shape=True), input_shapes={"x": [3, 16]})
    assert eng.inputs()[0].shape == (3, 16)
    assert eng.compiled_model.inputs[0].get_partial_shape().is_static
    assert eng.run({"x": np.zeros((3, 16), np.float32)})["y"].shape == (3, 8)
    with pytest.raises(xrt.PolicyError, match="rank"):
        build("openvino", tiny_mlp(), policy=exec_policy(static_shape=True), input_shapes={"x": [3]})


def test_int8_needs_a_quantized_model(tmp_path: Path) -> None:
    model = tiny_mlp(batch=4)
    with pytest.raises(xrt.UnsupportedOperationError, match="quantized model"):
        build("openvino", model, policy=exec_policy(precision="int8"))
    qdq = quantize_qdq(model, "x", (4, 16), tmp_path)
    eng = build("openvino", qdq, policy=exec_policy(precision="int8"))
    int8_layers = [
        d for d in eng.decisions() if d.rule == "engine.placement" and d.chosen.endswith(("/i8", "/u8"))
    ]
    assert int8_layers, "no layer runs in int8 according to the runtime model"
    x = np.random.default_rng(5).standard_normal((4, 16)).astype(np.float32)
    ref = tiny_mlp_reference(model, x)
    err = np.abs(eng.run({"x": x})["y"] - ref).max()
    assert err < 0.08 * np.abs(ref).max()


def test_outputs_are_fresh_arrays_and_inputs_are_not_modified() -> None:
    model = tiny_mlp(batch=2)
    eng = build("openvino", model)
    x1 = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
    x2 = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
    keep = x1.copy()
    y1 = eng.run({"x": x1})["y"]
    y1_copy = y1.copy()
    y2 = eng.run({"x": x2})["y"]
    assert not np.shares_memory(y1, y2)
    np.testing.assert_array_equal(y1, y1_copy)  # a later run did not overwrite it
    np.testing.assert_array_equal(x1, keep)


def test_torch_cpu_tensors_are_accepted() -> None:
    torch = pytest.importorskip("torch")
    model = tiny_mlp()
    t = torch.randn(5, 16)
    y = build("openvino", model).run({"x": t})["y"]
    assert_close_to(y, tiny_mlp_reference(model, t.numpy()), "ov torch input", rtol=1e-5, atol_fraction=1e-5)


def test_concurrent_runs() -> None:
    model = tiny_mlp()
    eng = build("openvino", model)
    rng = np.random.default_rng(12)
    xs = [rng.standard_normal((i + 1, 16)).astype(np.float32) for i in range(6)]
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        for _ in range(20):
            results[i] = eng.run({"x": xs[i]})["y"]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, x in enumerate(xs):
        assert_close_to(
            results[i], tiny_mlp_reference(model, x), f"ov thread {i}", rtol=1e-5, atol_fraction=1e-5
        )


def test_explicit_openvino_device_string_and_cache_dir(tmp_path: Path) -> None:
    eng = build("openvino", tiny_mlp(), ov_device="AUTO:CPU", cache_dir=str(tmp_path / "ovcache"))
    assert eng.effective_options["EXECUTION_DEVICES"] == ["CPU"]
    assert any(d.chosen == "ov_device=AUTO:CPU" for d in eng.decisions())
    assert any(d.chosen.startswith("CACHE_DIR=") for d in eng.decisions())


def test_bad_inputs() -> None:
    with pytest.raises(xrt.InvalidModelError):
        build("openvino", b"\x00\x01\x02 not onnx")
    with pytest.raises(xrt.InvalidArgumentError, match="OpenVINO devices"):
        from xpuruntime.engines.base import EngineOptions

        registry.get_engine_class("openvino")(tiny_mlp(), EngineOptions(device="cuda:0"))
