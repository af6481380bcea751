"""The orchestrator (issue 33): one model across the native engine and ONNX Runtime.

A model made with onnx.helper holds com.microsoft's Gelu, which the native engine has
no schema for, between two MatMuls: it runs as native + ONNX Runtime in three islands
and matches ONNX Runtime alone. Budgets fail at build time naming the nodes; the
partitioned session saves and loads bit-identically. Relative error: the largest
absolute difference over the reference's largest magnitude.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper
from xpuruntime import orchestrator
from xpuruntime._core import InvalidModelError, PolicyError, UnsupportedOperationError

ort = pytest.importorskip("onnxruntime", reason="ONNX Runtime runs the islands the native engine cannot")

RTOL = 1e-5


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    b64 = np.asarray(b, dtype=np.float64)
    return float(np.abs(np.asarray(a, dtype=np.float64) - b64).max() / max(np.abs(b64).max(), 1e-30))


def gelu_model(batch: int | str = 4, seed: int = 0) -> onnx.ModelProto:
    """x[b,16] -> MatMul -> com.microsoft.Gelu -> MatMul -> Add -> Tanh -> y[b,8]."""
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32) * 0.3, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 8)).astype(np.float32) * 0.3, "w2")
    b2 = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b2")
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
            helper.make_node("Gelu", ["h"], ["a"], name="ms_gelu", domain="com.microsoft"),
            helper.make_node("MatMul", ["a", "w2"], ["z"], name="fc2"),
            helper.make_node("Add", ["z", "b2"], ["zb"], name="bias2"),
            helper.make_node("Tanh", ["zb"], ["y"], name="tanh"),
        ],
        "gelu_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8])],
        [w1, w2, b2],
    )
    return helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)], ir_version=8
    )


def ort_alone(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


@pytest.fixture
def feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(11).standard_normal((4, 16)).astype(np.float32)}


# ------------------------------------------------------------------ capability
def test_native_capability_names_the_op_it_lacks_with_a_reason_code():
    graph = orchestrator.ModelGraph.load(gelu_model())
    caps = {c.node: c for c in orchestrator.engine_capability(graph, "native", "cpu")}
    assert not caps["ms_gelu"].supported
    assert caps["ms_gelu"].reason_code == xrt._core.reason.OP_UNSUPPORTED
    assert "com.microsoft" in caps["ms_gelu"].detail
    assert caps["fc1"].supported and caps["fc1"].kernels  # the matmul kernels, by name
    assert caps["tanh"].supported and caps["tanh"].place == "native@cpu"


def test_onnxruntime_capability_is_its_own_assignment():
    model = gelu_model()
    # An op no engine knows: ORT refuses it, and says so.
    model.graph.node.append(helper.make_node("Frobnicate", ["y"], ["q"], name="custom", domain="my.ops"))
    model.opset_import.append(helper.make_opsetid("my.ops", 1))
    model.graph.output.append(helper.make_tensor_value_info("q", TensorProto.FLOAT, None))
    graph = orchestrator.ModelGraph.load(model)
    caps = {c.node: c for c in orchestrator.engine_capability(graph, "onnxruntime", "cpu")}
    assert all(caps[n].supported for n in ("fc1", "ms_gelu", "fc2", "bias2", "tanh"))
    assert not caps["custom"].supported
    assert caps["custom"].reason_code == xrt._core.reason.OP_UNSUPPORTED
    assert "Frobnicate" in caps["custom"].detail
    # With both engines no candidate runs the custom node: the error names it and why.
    with pytest.raises(UnsupportedOperationError, match=r"'custom' \(my.ops.Frobnicate\)"):
        orchestrator.partition(graph, "cpu", ["native", "onnxruntime"])


def test_engine_not_installed_reports_the_install_hint():
    graph = orchestrator.ModelGraph.load(gelu_model())
    from xpuruntime.engines import registry

    av = registry.availability("tensorrt")
    if av.available:
        pytest.skip("TensorRT is installed here")
    caps = orchestrator.engine_capability(graph, "tensorrt", "cuda")
    assert all(c.reason_code == xrt._core.reason.BACKEND_UNAVAILABLE for c in caps)
    assert "not installed" in caps[0].detail and (av.install_hint or "") in caps[0].detail


# ------------------------------------------------------------------ running
def test_native_plus_onnxruntime_matches_onnxruntime_alone(feeds):
    model = gelu_model()
    sess = xrt.InferenceSession(model, device="cpu", engine=["native", "onnxruntime"])
    assert sess.engine == "native+onnxruntime"
    part = sess._engine.partition
    assert [i.place for i in part.islands] == ["native@cpu", "onnxruntime@cpu", "native@cpu"]
    assert [i.node_names for i in part.islands] == [["fc1"], ["ms_gelu"], ["fc2", "bias2", "tanh"]]
    for seed in range(3):
        x = {"x": np.random.default_rng(seed).standard_normal((4, 16)).astype(np.float32)}
        got = sess.run(x)["y"]
        (ref,) = ort_alone(model, x)
        assert rel_err(got, ref) <= RTOL, rel_err(got, ref)
    # explain(): the placement of every node, the islands and every copy with its bytes,
    # direction and measured time.
    log = sess.explain()
    placed = {d.node: d for d in log if d.op == "engine.partition"}
    assert placed["ms_gelu"].chosen == "onnxruntime@cpu" and placed["ms_gelu"].rule == "fallback"
    assert placed["ms_gelu"].candidate("native@cpu").reason_code == xrt._core.reason.OP_UNSUPPORTED
    assert placed["fc1"].rule == "policy.prefer"
    islands = [d for d in log if d.op == "engine.island"]
    assert [d.chosen for d in islands] == ["native@cpu", "onnxruntime@cpu", "native@cpu"]
    copies = [d for d in log if d.op == "engine.copy"]
    assert [d.node for d in copies] == ["h", "a"]
    assert "512 bytes native@cpu -> onnxruntime@cpu" in copies[0].detail  # 4 x 32 float32
    assert "us over 3 run(s)" in copies[0].detail
    stats = sess._engine.copies()
    assert stats[0]["bytes"] == 4 * 32 * 4 and stats[0]["runs"] == 3 and stats[0]["mean_us"] >= 0
    # The islands' own decisions follow (the native engine's kernels).
    assert any(d.op == "matmul" for d in log)
    # The profiler shows each island as a range.
    with xrt.profile() as prof:
        sess.run(feeds)
    assert "island1 onnxruntime@cpu" in prof.summary() and "island2 native@cpu" in prof.summary()


def test_engines_in_the_policy_partition_too(feeds):
    ep = xrt.ExecutionPolicy(engines=["native", "onnxruntime"], max_islands=3)
    sess = xrt.InferenceSession(gelu_model(), device="cpu", exec_policy=ep)
    (ref,) = ort_alone(gelu_model(), feeds)
    assert rel_err(sess.run(feeds)["y"], ref) <= RTOL


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the TorchScript exporter's notice
def test_torch_export_with_an_op_the_native_engine_lacks(tmp_path):
    torch = pytest.importorskip("torch", reason="the model is a torch export")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(12, 24)
            self.b = torch.nn.Linear(24, 6)

        def forward(self, x):
            return torch.softmax(self.b(torch.atan(self.a(x))), dim=-1)  # Atan: not in docs/ops.md

    torch.manual_seed(0)
    net = Net().eval()
    path = tmp_path / "atan.onnx"
    torch.onnx.export(
        net,
        (torch.randn(3, 12),),
        str(path),
        input_names=["x"],
        output_names=["p"],
        opset_version=17,
        dynamo=False,
    )
    model = onnx.load(str(path))
    assert "Atan" in {n.op_type for n in model.graph.node}
    sess = xrt.InferenceSession(str(path), device="cpu", engine=["native", "onnxruntime"])
    assert [i.engine for i in sess._engine.partition.islands] == ["native", "onnxruntime", "native"]
    x = {"x": np.random.default_rng(5).standard_normal((3, 12)).astype(np.float32)}
    (ref,) = ort_alone(model, x)
    assert rel_err(sess.run(x)["p"], ref) <= RTOL
    with torch.no_grad():
        want = net(torch.from_numpy(x["x"])).numpy()
    assert rel_err(sess.run(x)["p"], want) <= 1e-5


# ------------------------------------------------------------------ budgets
def test_max_islands_fails_at_build_time_naming_the_nodes():
    ep = xrt.ExecutionPolicy(max_islands=1)
    with pytest.raises(PolicyError, match=r"3 islands .* max_islands=1.*'ms_gelu'"):
        xrt.InferenceSession(gelu_model(), device="cpu", engine=["native", "onnxruntime"], exec_policy=ep)


def test_forbid_cpu_fails_naming_why():
    ep = xrt.ExecutionPolicy(forbid=["cpu"])
    with pytest.raises(
        PolicyError, match=r"forbid=\['cpu'\].*'fc1' \(MatMul\): native@cpu: forbidden by forbid entry 'cpu'"
    ):
        xrt.InferenceSession(gelu_model(), device="cpu", engine=["native", "onnxruntime"], exec_policy=ep)
    # Forbidding one engine leaves the nodes only it runs without a place.
    ep = xrt.ExecutionPolicy(forbid=["onnxruntime"])
    with pytest.raises(PolicyError, match=r"'ms_gelu' \(com.microsoft.Gelu\)"):
        xrt.InferenceSession(gelu_model(), device="cpu", engine=["native", "onnxruntime"], exec_policy=ep)


def test_fallback_nodes_and_copy_bytes_budgets():
    graph = orchestrator.ModelGraph.load(gelu_model())
    ok = orchestrator.partition(
        graph,
        "cpu",
        ["native", "onnxruntime"],
        xrt.ExecutionPolicy(max_fallback_nodes=1, max_copy_bytes=1024),
    )
    assert ok.violations == [] and ok.fallback_nodes == ["ms_gelu"] and ok.copy_bytes == 1024
    bad = orchestrator.partition(
        graph,
        "cpu",
        ["native", "onnxruntime"],
        xrt.ExecutionPolicy(max_fallback_nodes=0, max_copy_bytes=1023),
    )
    assert len(bad.violations) == 2
    assert "max_fallback_nodes=0: 'ms_gelu'" in bad.violations[0]
    assert "max_copy_bytes=1023" in bad.violations[1] and "'h' 512 B" in bad.violations[1]
    with pytest.raises(PolicyError, match="max_fallback_nodes"):
        bad.check()


def test_pins_place_nodes_and_fail_when_the_engine_cannot(feeds):
    ep = xrt.ExecutionPolicy(pins={"MatMul": "onnxruntime@cpu"})
    sess = xrt.InferenceSession(gelu_model(), device="cpu", engine=["native", "onnxruntime"], exec_policy=ep)
    assert [i.node_names for i in sess._engine.partition.islands] == [
        ["fc1", "ms_gelu", "fc2"],
        ["bias2", "tanh"],
    ]
    placed = {d.node: d for d in sess.explain() if d.op == "engine.partition"}
    assert placed["fc2"].rule == "pinned"
    (ref,) = ort_alone(gelu_model(), feeds)
    assert rel_err(sess.run(feeds)["y"], ref) <= RTOL
    ep = xrt.ExecutionPolicy(pins={"ms_gelu": "native"})
    with pytest.raises(UnsupportedOperationError, match=r"'ms_gelu' .* pinned to native@cpu.*op_unsupported"):
        xrt.InferenceSession(gelu_model(), device="cpu", engine=["native", "onnxruntime"], exec_policy=ep)


def test_allow_fallback_cpu_means_islands_may_run_on_the_cpu(feeds):
    from xpuruntime.engines.native import engine as native_engine

    if "cuda" in native_engine.devices():
        pytest.skip("CUDA is usable here: the islands would run there")
    # No engine runs on CUDA here: without allow_fallback nothing may go elsewhere...
    with pytest.raises(UnsupportedOperationError, match=r"native@cuda: backend_unavailable"):
        xrt.InferenceSession(gelu_model(), device="cuda", engine=["native", "onnxruntime"])
    # ...with allow_fallback="cpu" the islands run on the CPU, recorded as fallbacks.
    ep = xrt.ExecutionPolicy(allow_fallback="cpu")
    sess = xrt.InferenceSession(gelu_model(), device="cuda", engine=["native", "onnxruntime"], exec_policy=ep)
    assert [i.place for i in sess._engine.partition.islands] == [
        "native@cpu",
        "onnxruntime@cpu",
        "native@cpu",
    ]
    assert {d.rule for d in sess.explain() if d.op == "engine.partition"} == {"fallback"}
    (ref,) = ort_alone(gelu_model(), feeds)
    assert rel_err(sess.run(feeds)["y"], ref) <= RTOL


# ------------------------------------------------------------------ save / load
def test_partitioned_session_saves_and_loads_bit_identically(tmp_path, feeds):
    sess = xrt.InferenceSession(gelu_model(), device="cpu", engine=["native", "onnxruntime"])
    before = sess.run(feeds)["y"]
    path = tmp_path / "part.xrtpart"
    sess.save_plan(path)
    loaded = xrt.InferenceSession.load_plan(path)
    assert loaded.engine == "native+onnxruntime"
    for seed in (0, 1):
        x = {"x": np.random.default_rng(100 + seed).standard_normal((4, 16)).astype(np.float32)}
        assert np.array_equal(loaded.run(x)["y"], sess.run(x)["y"])
    assert np.array_equal(loaded.run(feeds)["y"], before)
    assert [d.chosen for d in loaded.explain() if d.op == "engine.island"] == [
        "native@cpu",
        "onnxruntime@cpu",
        "native@cpu",
    ]
    # A damaged island is refused, naming it.
    import zipfile

    bad = tmp_path / "bad.xrtpart"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.namelist():
            data = src.read(item)
            dst.writestr(item, data[:-1] + bytes([data[-1] ^ 1]) if item == "island1.onnx" else data)
    with pytest.raises(InvalidModelError, match=r"island 1 \(island1.onnx\) .* damaged"):
        xrt.InferenceSession.load_plan(bad)


# ------------------------------------------------------------------ policy fields
def test_execution_policy_orchestrator_fields_round_trip():
    ep = xrt.ExecutionPolicy(
        engines=["native", "ort"],
        pins={"Einsum": "onnxrt@cpu", "n1": "native"},
        max_islands=2,
        max_fallback_nodes=0,
        max_copy_bytes=1 << 20,
        forbid=["cpu", "ov"],
    )
    assert ep.engines == ["native", "onnxruntime"]
    assert ep.pins == {"Einsum": "onnxruntime@cpu", "n1": "native"}
    assert ep.forbid == ["cpu", "openvino"]
    again = xrt.ExecutionPolicy.from_json(ep.to_json())
    assert again == ep and again.fingerprint == ep.fingerprint and again.max_copy_bytes == 1 << 20
    doc = json.loads(ep.canonical_json())
    assert doc["engines"] == ["native", "onnxruntime"] and doc["max_islands"] == 2
    # Unset, they are not written: a policy without them keeps its old fingerprint.
    plain = json.loads(xrt.ExecutionPolicy(target="cpu").canonical_json())
    assert not {"engines", "pins", "max_islands", "max_fallback_nodes", "max_copy_bytes", "forbid"} & set(
        plain
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_islands": 0}, "max_islands must be None"),
        ({"max_copy_bytes": -1}, "max_copy_bytes must be None"),
        ({"engines": ["native", "native"]}, "twice"),
        ({"engines": ["nativ"]}, "did you mean 'native'"),
        ({"pins": {"MatMul": "onnxruntime@tpu"}}, "valid devices"),
        ({"pins": ["MatMul"]}, "pins must map"),
        ({"forbid": [""]}, "forbid"),
    ],
)
def test_execution_policy_orchestrator_fields_refuse_bad_values(kwargs, match):
    with pytest.raises(PolicyError, match=match):
        xrt.ExecutionPolicy(**kwargs)


def test_policy_file_with_bad_orchestrator_fields_is_a_policy_error():
    with pytest.raises(PolicyError, match="max_islands"):
        xrt.ExecutionPolicy.from_json('{"kind": "execution_policy", "max_islands": 0}')
    with pytest.raises(PolicyError, match="pins"):
        xrt.ExecutionPolicy.from_json('{"kind": "execution_policy", "pins": {"MatMul": 3}}')
