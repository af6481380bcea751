"""Triton users' view of the server: auto-completed configuration (the bundled demo from a
bare repository), the model-configuration and statistics extensions through tritonclient
(HTTP and gRPC), JSON 404/405 bodies, consistent metadata, variable dimensions, ONNX
external data and the access log. Everything talks to 127.0.0.1 only."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("grpc")
httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")

import onnx
from onnx import TensorProto, helper, numpy_helper
from xpuruntime.models import demo_model_path
from xpuruntime.serving import InferenceServer


def _attention_model(seed: int, d: int = 16) -> onnx.ModelProto:
    """Self-attention over a variable sequence: softmax(x Wq (x Wk)^T / 4) x Wv, [batch, seq, d]."""
    rng = np.random.default_rng(seed)
    ws = [(rng.standard_normal((d, d)) / 4).astype(np.float32) for _ in range(3)]
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s0"]),
        helper.make_node("Mul", ["s0", "scale"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    inits = [numpy_helper.from_array(w, n) for w, n in zip(ws, ("wq", "wk", "wv"))]
    inits.append(numpy_helper.from_array(np.array(0.25, np.float32), "scale"))
    graph = helper.make_graph(
        nodes,
        "attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", d])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bare_repo")
    (root / "demo" / "1").mkdir(parents=True)
    shutil.copy(demo_model_path(), root / "demo" / "1" / "model.onnx")  # no config at all
    (root / "attn" / "1").mkdir(parents=True)
    onnx.save(_attention_model(7), str(root / "attn" / "1" / "model.onnx"))
    # ONNX external data: the weights in model.onnx.data beside the model.
    (root / "attn_ext" / "1").mkdir(parents=True)
    onnx.save(
        _attention_model(8),
        str(root / "attn_ext" / "1" / "model.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="model.onnx.data",
        size_threshold=0,
    )
    assert (root / "attn_ext" / "1" / "model.onnx.data").is_file()
    return root


@pytest.fixture(scope="module")
def server(repo: Path):
    srv = InferenceServer(repo, http_port=0, grpc_port=0, threads=4).start()
    try:
        yield srv
    finally:
        srv.stop(grace=5)


@pytest.fixture()
def hc(server: InferenceServer):
    c = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}", network_timeout=60)
    yield c
    c.close()


@pytest.fixture()
def gc(server: InferenceServer):
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    yield c
    c.close()


def _reference(model_file: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def test_demo_from_a_bare_repository_answers_batch_1_and_4(hc, gc, repo: Path) -> None:
    rng = np.random.default_rng(11)
    for batch in (1, 4):
        x = rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)
        want = _reference(repo / "demo" / "1" / "model.onnx", {"image": x})["logits"]
        inp = httpclient.InferInput("image", list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=True)
        got = hc.infer("demo", [inp]).as_numpy("logits")
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        ginp = grpcclient.InferInput("image", list(x.shape), "FP32")
        ginp.set_data_from_numpy(x)
        np.testing.assert_allclose(gc.infer("demo", [ginp]).as_numpy("logits"), want, rtol=1e-4, atol=1e-5)


def test_model_config_http_and_grpc(hc, gc) -> None:
    cfg = hc.get_model_config("demo")
    assert cfg["name"] == "demo" and cfg["max_batch_size"] == 4 and cfg["backend"] == "xpuruntime"
    assert cfg["input"] == [
        {"name": "image", "data_type": "TYPE_FP32", "format": "FORMAT_NONE", "dims": [3, 32, 32]}
    ]
    assert cfg["output"] == [{"name": "logits", "data_type": "TYPE_FP32", "dims": [10]}]
    assert cfg["instance_group"][0]["kind"] == "KIND_CPU"
    assert cfg["parameters"]["shape_buckets"]["string_value"] == "1,2,4"
    assert "auto-complete" in cfg["parameters"]["config_source"]["string_value"]
    g = gc.get_model_config("demo").config
    assert g.name == "demo" and g.max_batch_size == 4 and list(g.input[0].dims) == [3, 32, 32]
    assert g.input[0].data_type == 11 and list(g.output[0].dims) == [10]  # TYPE_FP32
    attn = gc.get_model_config("attn", as_json=True)["config"]
    assert attn["input"][0]["dims"] == ["-1", "16"] and attn["output"][0]["dims"] == ["-1", "16"]


def test_metadata_is_consistent_with_the_configuration(hc, gc) -> None:
    md = hc.get_model_metadata("demo")
    assert md["inputs"][0]["shape"] == [-1, 3, 32, 32] and md["outputs"][0]["shape"] == [-1, 10]
    md = gc.get_model_metadata("attn", as_json=True)
    assert md["inputs"][0]["shape"] == ["-1", "-1", "16"] and md["outputs"][0]["shape"] == ["-1", "-1", "16"]


def test_inference_statistics_http_and_grpc(hc, gc, server: InferenceServer) -> None:
    before = hc.get_inference_statistics("demo")["model_stats"][0]
    x = np.random.default_rng(3).standard_normal((3, 3, 32, 32)).astype(np.float32)
    inp = httpclient.InferInput("image", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    hc.infer("demo", [inp])
    bad = httpclient.InferInput("image", [1, 3, 31, 32], "FP32")
    bad.set_data_from_numpy(np.zeros((1, 3, 31, 32), np.float32), binary_data=True)
    with pytest.raises(Exception, match=r"expects \[-1, 3, 32, 32\]"):
        hc.infer("demo", [bad])
    s = hc.get_inference_statistics("demo")["model_stats"][0]
    assert s["name"] == "demo" and s["version"] == "1"
    assert s["inference_count"] == before["inference_count"] + 3
    assert s["execution_count"] == before["execution_count"] + 1
    st = s["inference_stats"]
    assert st["success"]["count"] == before["inference_stats"]["success"]["count"] + 1
    assert st["fail"]["count"] == before["inference_stats"]["fail"]["count"] + 1
    assert st["compute_infer"]["ns"] > before["inference_stats"]["compute_infer"]["ns"]
    assert st["success"]["ns"] >= st["compute_infer"]["ns"]
    assert any(
        b["batch_size"] == 4 and b["compute_infer"]["count"] >= 1 for b in s["batch_stats"]
    )  # padded 3 -> 4
    g = gc.get_inference_statistics("demo", as_json=True)["model_stats"][0]
    assert int(g["inference_count"]) == s["inference_count"]
    every = gc.get_inference_statistics(as_json=True)["model_stats"]
    assert {m["name"] for m in every} >= {"demo", "attn"}


@pytest.mark.parametrize("model", ["attn", "attn_ext"])
def test_variable_sequence_lengths_match_onnx_runtime(hc, gc, repo: Path, model: str) -> None:
    rng = np.random.default_rng(5)
    for seq in (8, 16, 32):
        x = rng.standard_normal((2, seq, 16)).astype(np.float32)
        want = _reference(repo / model / "1" / "model.onnx", {"x": x})["y"]
        inp = httpclient.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=True)
        np.testing.assert_allclose(hc.infer(model, [inp]).as_numpy("y"), want, rtol=1e-5, atol=1e-5)
        ginp = grpcclient.InferInput("x", list(x.shape), "FP32")
        ginp.set_data_from_numpy(x)
        np.testing.assert_allclose(gc.infer(model, [ginp]).as_numpy("y"), want, rtol=1e-5, atol=1e-5)


def test_unknown_routes_and_wrong_methods_get_json(server: InferenceServer) -> None:
    import json
    import urllib.error
    import urllib.request

    base = f"http://127.0.0.1:{server.http_port}"
    for method, path, status, needle in [
        ("GET", "/v2/nothing/here", 404, "no endpoint of the Open Inference Protocol has this path"),
        ("GET", "/v2/models/demo/infer", 405, "allowed: POST"),
        ("POST", "/v2/models/demo/config", 405, "allowed: GET, HEAD"),
        ("GET", "/v2/models/nobody/config", 404, "nobody"),
    ]:
        req = urllib.request.Request(base + path, method=method, data=b"{}" if method == "POST" else None)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=30)
        assert err.value.code == status
        assert err.value.headers["content-type"].startswith("application/json")
        assert needle in json.loads(err.value.read())["error"]


def test_access_log_and_load_logging(hc, gc, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="xpuruntime.serving"):
        hc.get_model_metadata("demo")
        gc.get_model_metadata("demo")
        hc.unload_model("attn")
        hc.load_model("attn")
    text = caplog.text
    assert "REST GET /v2/models/demo demo 200" in text
    assert "gRPC ModelMetadata demo OK" in text
    assert "model attn: unloaded" in text and "model attn version 1: READY" in text
    assert "warm-up at batch 1" in text


def test_dynamic_batching_with_a_variable_dimension_is_refused(tmp_path: Path) -> None:
    import json

    (tmp_path / "attn" / "1").mkdir(parents=True)
    onnx.save(_attention_model(9), str(tmp_path / "attn" / "1" / "model.onnx"))
    (tmp_path / "attn" / "config.json").write_text(
        json.dumps({"max_batch_size": 4, "dynamic_batching": {"max_queue_delay_us": 100}})
    )
    from xpuruntime.serving.repository import ModelRepository

    r = ModelRepository(tmp_path)
    r.load_all()
    (entry,) = r.index()
    assert (
        entry["state"] == "UNAVAILABLE"
        and "'x' dimension 1 ('seq')" in entry["reason"]
        and "dims" in entry["reason"]
    )
    # Fixing the dimension makes it batchable.
    (tmp_path / "attn" / "config.json").write_text(
        json.dumps({"max_batch_size": 4, "dims": {"seq": 8}, "dynamic_batching": {"max_queue_delay_us": 100}})
    )
    r.load("attn")
    assert r.get("attn").model.metadata()["inputs"][0]["shape"] == [-1, 8, 16]
    r.close()


def test_bert_with_a_variable_sequence_length(tmp_path: Path) -> None:
    """A BERT (model_zoo's bert_tiny, [batch, seq] ids and mask) from a bare repository answers
    sequence lengths 8, 16 and 32 within 1e-5 of ONNX Runtime, over HTTP and gRPC."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import model_zoo

    (tmp_path / "bert" / "1").mkdir(parents=True)
    shutil.copy(model_zoo.export("bert_tiny"), tmp_path / "bert" / "1" / "model.onnx")
    srv = InferenceServer(tmp_path, http_port=0, grpc_port=0, threads=2).start()
    hc = httpclient.InferenceServerClient(f"127.0.0.1:{srv.http_port}", network_timeout=60)
    gc = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    try:
        cfg = hc.get_model_config("bert")
        assert cfg["max_batch_size"] == 4 and [i["dims"] for i in cfg["input"]] == [[-1], [-1]]
        rng = np.random.default_rng(21)
        for seq in (8, 16, 32):
            ids = rng.integers(0, 1000, size=(2, seq), dtype=np.int64)
            mask = np.ones((2, seq), dtype=np.int64)
            mask[1, seq - 3 :] = 0
            want = _reference(
                tmp_path / "bert" / "1" / "model.onnx", {"input_ids": ids, "attention_mask": mask}
            )
            want = want["last_hidden_state"]
            inputs = []
            for name, arr in (("input_ids", ids), ("attention_mask", mask)):
                inp = httpclient.InferInput(name, list(arr.shape), "INT64")
                inp.set_data_from_numpy(arr, binary_data=True)
                inputs.append(inp)
            got = hc.infer("bert", inputs).as_numpy("last_hidden_state")
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
            ginputs = []
            for name, arr in (("input_ids", ids), ("attention_mask", mask)):
                g = grpcclient.InferInput(name, list(arr.shape), "INT64")
                g.set_data_from_numpy(arr)
                ginputs.append(g)
            got = gc.infer("bert", ginputs).as_numpy("last_hidden_state")
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    finally:
        hc.close()
        gc.close()
        srv.stop(grace=5)


def test_bert_padded_to_sequence_buckets_with_dynamic_batching(tmp_path: Path) -> None:
    """The BERT with ``pad: {seq: [16, 32]}`` and dynamic batching: every (batch, seq) bucket
    is built at load, requests of lengths 5..32 are zero-padded (their attention_mask masks the
    padding), batched together, cut back, and answer within 1e-5 of ONNX Runtime at their own
    length; the metadata and configuration report seq as -1 and the padded sizes."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import json

    import model_zoo

    (tmp_path / "bert" / "1").mkdir(parents=True)
    shutil.copy(model_zoo.export("bert_tiny"), tmp_path / "bert" / "1" / "model.onnx")
    (tmp_path / "bert" / "config.json").write_text(
        json.dumps(
            {"max_batch_size": 4, "pad": {"seq": [32, 16]}, "dynamic_batching": {"max_queue_delay_us": 20000}}
        )
    )
    srv = InferenceServer(tmp_path, http_port=0, grpc_port=0, threads=8).start()
    hc = httpclient.InferenceServerClient(f"127.0.0.1:{srv.http_port}", network_timeout=60, concurrency=8)
    try:
        model = srv.repository.get("bert").model
        assert sorted(model._sessions) == [(b, (s,)) for b in (1, 2, 4) for s in (16, 32)]
        assert hc.get_model_metadata("bert")["inputs"][0]["shape"] == [-1, -1]
        cfg = hc.get_model_config("bert")
        assert cfg["parameters"]["padded_dims"]["string_value"] == "seq:16,32"
        rng = np.random.default_rng(34)
        cases = []
        for seq in (5, 8, 16, 17, 32, 8, 16, 32):
            ids = rng.integers(1, 1000, size=(1, seq), dtype=np.int64)
            mask = np.ones((1, seq), dtype=np.int64)
            mask[0, seq - 2 :] = 0
            want = _reference(
                tmp_path / "bert" / "1" / "model.onnx", {"input_ids": ids, "attention_mask": mask}
            )["last_hidden_state"]
            cases.append((ids, mask, want))

        def inputs(case):
            ids, mask, _ = case
            out = []
            for name, arr in (("input_ids", ids), ("attention_mask", mask)):
                inp = httpclient.InferInput(name, list(arr.shape), "INT64")
                inp.set_data_from_numpy(arr, binary_data=True)
                out.append(inp)
            return out

        def ask(case):
            return hc.infer("bert", inputs(case)).as_numpy("last_hidden_state")

        # in flight together (the client's own concurrency), so the batcher pads and joins them
        pending = [hc.async_infer("bert", inputs(c)) for c in cases]
        got = [p.get_result().as_numpy("last_hidden_state") for p in pending]
        for (_, _, want), g in zip(cases, got):
            np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)
        stats = hc.get_inference_statistics("bert")["model_stats"][0]
        assert stats["inference_count"] == len(cases)
        assert stats["execution_count"] < len(cases)  # requests of different lengths ran together
        too_long = httpclient.InferInput("input_ids", [1, 33], "INT64")
        too_long.set_data_from_numpy(np.ones((1, 33), np.int64), binary_data=True)
        mask = httpclient.InferInput("attention_mask", [1, 33], "INT64")
        mask.set_data_from_numpy(np.ones((1, 33), np.int64), binary_data=True)
        with pytest.raises(
            Exception, match=r"dimension 1 \('seq'\) is 33; this model serves it from 1 to 32"
        ):
            hc.infer("bert", [too_long, mask])
        np.testing.assert_allclose(ask(cases[0]), cases[0][2], rtol=1e-5, atol=1e-5)
    finally:
        hc.close()
        srv.stop(grace=5)


def test_pad_configs_are_checked(tmp_path: Path) -> None:
    import json

    from xpuruntime.serving.config import ConfigError, ModelConfig
    from xpuruntime.serving.repository import ModelRepository

    for cfg, match in [
        ({"pad": {"seq": []}}, "pad.seq must be a list of 1 to 16 sizes"),
        ({"pad": {"seq": list(range(1, 20))}}, "pad.seq must be a list of 1 to 16 sizes"),
        ({"pad": {"seq": [0, 8]}}, "pad.seq must be an integer >= 1"),
        ({"pad": {"seq": [8.5]}}, "pad.seq must be an integer"),
        ({"pad": ["seq"]}, "pad must map a dimension name"),
        ({"pad": {"seq": [8]}, "dims": {"seq": 8}}, "both fixed"),
        ({"pad": {f"d{i}": [8] for i in range(5)}}, "at most 4"),
    ]:
        with pytest.raises(ConfigError, match=match):
            ModelConfig.from_dict(cfg, "m", "m/config.json")
    assert ModelConfig.from_dict({"pad": {"seq": [32, 8, 8]}}, "m", "w").pad == {"seq": (8, 32)}
    (tmp_path / "attn" / "1").mkdir(parents=True)
    onnx.save(_attention_model(3), str(tmp_path / "attn" / "1" / "model.onnx"))
    (tmp_path / "attn" / "config.json").write_text(json.dumps({"max_batch_size": 2, "pad": {"len": [8]}}))
    r = ModelRepository(tmp_path)
    r.load_all()
    (entry,) = r.index()
    assert entry["state"] == "UNAVAILABLE" and "pad names dimension 'len'" in entry["reason"]
    assert "'x' ['batch', 'seq', '16']" in entry["reason"]
    r.close()
