"""ONNX Runtime adapter on the CPU: correctness against independent references, the
policy mappings read back from the built session, placement, zero-copy, errors."""

from __future__ import annotations

import threading
from pathlib import Path

import model_zoo
import numpy as np
import onnxruntime as ort
import pytest
import xpuruntime as xrt
from engine_testlib import assert_close_to, build, exec_policy, tiny_mlp, tiny_mlp_reference
from xpuruntime.engines import registry

pytestmark = pytest.mark.skipif(
    not registry.availability("onnxruntime").available, reason="onnxruntime not installed"
)


def test_tiny_mlp_matches_float64_reference() -> None:
    model = tiny_mlp()
    eng = build("onnxruntime", model)
    for batch in (1, 5, 33):
        x = np.random.default_rng(batch).standard_normal((batch, 16)).astype(np.float32)
        (y,) = eng.run({"x": x}).values()
        assert_close_to(
            y, tiny_mlp_reference(model, x), f"ort tiny_mlp batch {batch}", rtol=1e-5, atol_fraction=1e-6
        )
    assert [i.name for i in eng.inputs()] == ["x"] and eng.inputs()[0].shape == ("n", 16)
    assert eng.outputs()[0].dtype == "float32"


@pytest.mark.parametrize("name", model_zoo.MODELS)
def test_zoo_models_match_pytorch(name: str) -> None:
    path = model_zoo.export(name)
    eng = build("onnxruntime", path)
    feeds = model_zoo.sample_inputs(name, np.random.default_rng(7), batch=2)
    ref = model_zoo.torch_reference(name, feeds)
    out = eng.run(feeds)
    for key, value in ref.items():
        assert_close_to(out[key], value, f"onnxruntime {name}:{key} vs torch")
    if registry.availability("native").available:
        native = build("native", path).run(feeds)
        for key in ref:
            assert_close_to(out[key], native[key], f"onnxruntime {name}:{key} vs native")


def test_policy_mappings_are_read_back_from_the_session() -> None:
    policy = exec_policy(threads=1, deterministic=True)
    eng = build("onnxruntime", tiny_mlp(), policy=policy, graph_optimization_level="basic")
    so = eng.session.get_session_options()  # the compiled object itself
    assert so.intra_op_num_threads == 1
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert so.use_deterministic_compute
    eff = eng.effective_options
    assert eff["intra_op_num_threads"] == 1 and eff["providers"] == ["CPUExecutionProvider"]
    by_node = {d.node: d for d in eng.decisions() if d.op == "engine.policy"}
    assert by_node["onnxruntime:threads"].chosen == "intra_op_num_threads=1"
    assert "read back: intra_op_num_threads=1" in by_node["onnxruntime:threads"].detail
    assert by_node["onnxruntime:threads"].rule == "policy.threads"
    assert (
        by_node["onnxruntime:graph_optimization_level"].chosen == "graph_optimization_level=ORT_ENABLE_BASIC"
    )
    assert by_node["onnxruntime:deterministic"].chosen == "use_deterministic_compute=True"


def test_defaults_are_recorded_as_defaults() -> None:
    eng = build("onnxruntime", tiny_mlp())
    by_node = {d.node: d for d in eng.decisions() if d.op == "engine.policy"}
    assert by_node["onnxruntime:graph_optimization_level"].rule == "default"
    assert by_node["onnxruntime:threads"].rule == "default"
    assert (
        eng.session.get_session_options().graph_optimization_level
        == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    )


def test_every_node_placement_is_recorded() -> None:
    eng = build("onnxruntime", tiny_mlp(), graph_optimization_level="disable")
    placed = {d.node: d.chosen for d in eng.decisions() if d.rule == "engine.placement"}
    assert placed == {n: "CPUExecutionProvider" for n in ("mm1", "add1", "relu1", "mm2")}


def test_explain_shows_the_mappings() -> None:
    try:
        from xpuruntime.inference import InferenceSession
    except ImportError as exc:
        pytest.skip(f"InferenceSession (native-engine issue) not built yet: {exc}")
    sess = InferenceSession(tiny_mlp(), engine="onnxruntime", device="cpu", exec_policy=exec_policy(threads=1))
    text = str(sess.explain())
    assert "intra_op_num_threads=1" in text and "onnxruntime@cpu" in text


def test_int8_dynamic_quantization(tmp_path: Path) -> None:
    model = tiny_mlp()
    eng = build("onnxruntime", model, policy=exec_policy(precision="int8"))
    ops = {d.op for d in eng.decisions() if d.rule == "engine.placement"}
    assert "MatMulInteger" in ops or "DynamicQuantizeMatMul" in ops, ops
    x = np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32)
    y = eng.run({"x": x})["y"]
    ref = tiny_mlp_reference(model, x)
    # int8 weights and activations: a few percent of the output range
    assert np.abs(y - ref).max() < 0.05 * np.abs(ref).max()
    assert np.abs(y - ref).max() > 0  # it really ran quantized


def test_fp16_on_cpu_is_refused_with_the_reason() -> None:
    with pytest.raises(xrt.UnsupportedOperationError, match="onnxruntime@cpu: dtype_unsupported.*fp16"):
        registry.select_engine("onnxruntime", "cpu", exec_policy(precision="fp16"))


def test_static_shape_needs_shapes_and_fixes_them() -> None:
    with pytest.raises(xrt.PolicyError, match="input_shapes"):
        build("onnxruntime", tiny_mlp(), policy=exec_policy(static_shape=True))
    eng = build("onnxruntime", tiny_mlp(), policy=exec_policy(static_shape=True), input_shapes={"x": [4, 16]})
    d = next(d for d in eng.decisions() if d.node == "onnxruntime:static_shape")
    assert d.chosen == "free_dimension_overrides={'n': 4}"
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    assert eng.run({"x": x})["y"].shape == (4, 8)


def test_dlpack_inputs_are_bound_without_copy() -> None:
    torch = pytest.importorskip("torch")
    from xpuruntime.engines.onnxruntime import _as_ortvalue

    model = tiny_mlp()
    eng = build("onnxruntime", model)
    t = torch.randn(6, 16)
    value = _as_ortvalue(ort, t)
    assert value.data_ptr() == t.data_ptr()  # shares the torch buffer
    y = eng.run({"x": t})["y"]
    assert isinstance(y, np.ndarray)
    assert_close_to(
        y, tiny_mlp_reference(model, t.numpy()), "ort dlpack input", rtol=1e-5, atol_fraction=1e-6
    )


def test_output_subset_and_concurrent_runs() -> None:
    model = tiny_mlp()
    eng = build("onnxruntime", model)
    assert list(eng.run({"x": np.ones((1, 16), np.float32)}, ["y"])) == ["y"]
    rng = np.random.default_rng(11)
    xs = [rng.standard_normal((3, 16)).astype(np.float32) for _ in range(8)]
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
            results[i], tiny_mlp_reference(model, x), f"thread {i}", rtol=1e-5, atol_fraction=1e-6
        )


def test_bad_models_raise_invalid_model(tmp_path: Path) -> None:
    with pytest.raises(xrt.InvalidModelError, match="does not exist"):
        build("onnxruntime", tmp_path / "missing.onnx")
    with pytest.raises(xrt.InvalidModelError):
        build("onnxruntime", b"\x08\x01garbage-that-is-not-a-model\xff\xff")
    with pytest.raises(xrt.InvalidModelError, match="ModelProto"):
        build("onnxruntime", 42)


def test_unknown_optimization_level() -> None:
    with pytest.raises(xrt.InvalidArgumentError, match="graph_optimization_level"):
        build("onnxruntime", tiny_mlp(), graph_optimization_level="turbo")
