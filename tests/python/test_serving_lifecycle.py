"""xpuruntime.serving: configs, load failures, graceful shutdown and the ``serve`` command."""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "tritonclient.http", reason="the serving tests need tritonclient[http,grpc] (serve extra)"
)
pytest.importorskip("uvicorn", reason="the serving tests need the serve extra (uvicorn, starlette, grpcio)")

import onnx
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import xpuruntime as xrt
from onnx import TensorProto, helper
from serving_testlib import mlp_model, wait_until, write_model
from xpuruntime.serving import ConfigError, InferenceServer, ModelConfig, ModelRepository

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------- configs
def test_config_buckets() -> None:
    assert ModelConfig("m").buckets() == ()
    assert ModelConfig("m", max_batch_size=6).buckets() == (1, 2, 4, 6)
    cfg = ModelConfig.from_dict(
        {"max_batch_size": 16, "dynamic_batching": {"preferred_batch_sizes": [8, 4, 8]}}, "m", "cfg"
    )
    assert cfg.buckets() == (4, 8, 16)
    assert cfg.dynamic_batching is not None and cfg.dynamic_batching.max_queue_delay_us == 500


@pytest.mark.parametrize(
    "data,match",
    [
        ({"max_batch_sise": 4}, "unknown field 'max_batch_sise'"),
        ({"max_batch_size": -1}, "max_batch_size must be an integer >= 0"),
        ({"dynamic_batching": {}}, "needs max_batch_size >= 1"),
        (
            {"max_batch_size": 4, "dynamic_batching": {"preferred_batch_sizes": [8]}},
            "exceeds max_batch_size 4",
        ),
        ({"max_batch_size": 4, "dynamic_batching": {"max_delay": 1}}, "unknown dynamic_batching field"),
        ({"max_batch_size": 4, "dynamic_batching": {"max_queue_size": 0}}, "max_queue_size must be"),
        ({"dims": {"seq": "x"}}, "dims.seq must be an integer"),
        ({"versions": []}, "versions must be a non-empty list"),
        ({"engine": 3}, "engine must be a non-empty string"),
        ({"instances": 0}, "instances must be an integer >= 1"),
    ],
)
def test_bad_configs_name_the_field(data, match) -> None:
    with pytest.raises(ConfigError, match=match):
        ModelConfig.from_dict(data, "m", "m/config.json")


def _seq_model() -> onnx.ModelProto:
    """y = x * 2 over [batch, seq, 4]: 'seq' fixed by the config, or variable."""
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["y"])],
        "seq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])],
        [two],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_failed_models_are_reported_and_others_served(tmp_path: Path) -> None:
    # A symbolic 'seq' without a value: variable, but then it cannot be batched dynamically.
    write_model(
        tmp_path / "needs_dims",
        _seq_model(),
        {"max_batch_size": 2, "dynamic_batching": {"max_queue_delay_us": 100}},
    )
    write_model(tmp_path / "variable", _seq_model(), {"max_batch_size": 2})
    write_model(tmp_path / "with_dims", _seq_model(), {"max_batch_size": 2, "dims": {"seq": 5}})
    write_model(tmp_path / "bad_json", mlp_model(0))
    (tmp_path / "bad_json" / "config.json").write_text("{not json")
    write_model(tmp_path / "missing_version", mlp_model(0), {"versions": [3]}, version=1)
    (tmp_path / "empty").mkdir()
    repo = ModelRepository(tmp_path)
    repo.load_all()
    index = {e["name"]: e for e in repo.index()}
    assert index["with_dims"]["state"] == "READY"
    assert "dims" in index["needs_dims"]["reason"] and "'seq'" in index["needs_dims"]["reason"]
    assert "not valid JSON" in index["bad_json"]["reason"]
    assert "version folder 3" in index["missing_version"]["reason"]
    assert "no model.onnx or model.xrtplan" in index["empty"]["reason"]
    sched = repo.get("with_dims")
    from xpuruntime.serving import InferRequest

    x = np.arange(2 * 5 * 4, dtype=np.float32).reshape(2, 5, 4)
    out = sched.infer(InferRequest("with_dims", "", {"x": x}))
    np.testing.assert_array_equal(out.outputs["y"], x * 2)
    assert index["variable"]["state"] == "READY"
    for seq in (3, 7):
        x = np.random.default_rng(seq).standard_normal((1, seq, 4)).astype(np.float32)
        out = repo.get("variable").infer(InferRequest("variable", "", {"x": x}))
        np.testing.assert_array_equal(out.outputs["y"], x * 2)
    repo.close()


# ---------------------------------------------------------------------- graceful shutdown
def test_stop_lets_queued_requests_finish(tmp_path: Path) -> None:
    slow = {
        "max_batch_size": 8,
        "dynamic_batching": {"preferred_batch_sizes": [8], "max_queue_delay_us": 2_000_000},
    }
    write_model(tmp_path / "mlp", mlp_model(0), slow)
    server = InferenceServer(tmp_path, http_port=0, grpc_port=0).start()
    sched = server.repository.get("mlp")
    results: list[object] = []

    def one(k: int) -> None:
        c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        inp = grpcclient.InferInput("x", [1, 16], "FP32")
        inp.set_data_from_numpy(np.full((1, 16), k, np.float32))
        try:
            results.append(c.infer("mlp", [inp]).as_numpy("y").shape)
        except Exception as exc:  # noqa: BLE001 - recorded: the test asserts none happened
            results.append(exc)
        finally:
            c.close()

    threads = [threading.Thread(target=one, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    wait_until(lambda: sched.queue_depth() == 4, what="four requests in the batcher's queue (2 s delay)")
    t0 = time.perf_counter()
    server.stop(grace=10)
    for t in threads:
        t.join(10)
    assert results == [(1, 8)] * 4, results
    assert time.perf_counter() - t0 < 10
    assert not server.ready()


# ---------------------------------------------------------------------- the serve command
def _start_cli(repo: Path) -> tuple[subprocess.Popen, int, int]:
    env = dict(os.environ)
    # The child imports the package this process imported (the installed one in CI, the
    # source tree under XRT_BUILD_DIR in a developer build).
    env["PYTHONPATH"] = str(Path(xrt.__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "xpuruntime.cli",
            "serve",
            "--model-repository",
            str(repo),
            "--http-port",
            "0",
            "--grpc-port",
            "0",
            "--grace",
            "10",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 120
    lines = []
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"REST on [^:]+:(\d+), gRPC on [^:]+:(\d+)", line)
        if m:
            return proc, int(m.group(1)), int(m.group(2))
    proc.kill()
    raise AssertionError("xpuruntime serve did not start:\n" + "".join(lines))


def test_serve_command_sigterm_is_graceful(tmp_path: Path) -> None:
    write_model(tmp_path / "mlp", mlp_model(0), {"max_batch_size": 4})
    proc, http_port, grpc_port = _start_cli(tmp_path)
    try:
        c = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
        assert c.is_server_ready() and c.is_model_ready("mlp")
        inp = httpclient.InferInput("x", [2, 16], "FP32")
        inp.set_data_from_numpy(np.ones((2, 16), np.float32))
        assert c.infer("mlp", [inp]).as_numpy("y").shape == (2, 8)
        c.close()
        assert grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}").is_server_live()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_command_second_signal_stops_at_once(tmp_path: Path) -> None:
    slow = {
        "max_batch_size": 8,
        "dynamic_batching": {"preferred_batch_sizes": [8], "max_queue_delay_us": 20_000_000},
    }
    write_model(tmp_path / "mlp", mlp_model(0), slow)
    proc, http_port, grpc_port = _start_cli(tmp_path)

    def queued() -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=10)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        return 'xrt_inference_queue_depth{model="mlp",version="1"} 1.0' in text

    def waiting_request() -> None:  # sits in the batcher's queue for 20 s: the graceful stop waits on it
        c = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        inp = grpcclient.InferInput("x", [1, 16], "FP32")
        inp.set_data_from_numpy(np.ones((1, 16), np.float32))
        # The server goes away under it, as intended: whatever the client raises is expected.
        with contextlib.suppress(Exception):
            c.infer("mlp", [inp], client_timeout=30)

    t = threading.Thread(target=waiting_request, daemon=True)
    try:
        t.start()
        wait_until(queued, what="the request to wait in the server's queue")
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None, "the graceful stop should still wait for the queued request"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 130
        assert time.monotonic() - t0 < 5
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_example_repository_serves_the_demo_model() -> None:
    """docs/serving.md's example repository: the bundled demo model, batched, equal to a direct run."""
    import xpuruntime as xrt

    repo = ROOT / "examples" / "serving" / "model_repository"
    with InferenceServer(repo, http_port=0, grpc_port=0) as server:
        c = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        try:
            md = c.get_model_metadata("demo")
            assert md["inputs"][0]["shape"] == [-1, 3, 32, 32]
            x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
            inp = httpclient.InferInput("image", [2, 3, 32, 32], "FP32")
            inp.set_data_from_numpy(x)
            res = c.infer("demo", [inp])
        finally:
            c.close()
    sess = xrt.InferenceSession(str(repo / "demo" / "1" / "model.onnx"), device="cpu")
    (name,) = [o.name for o in sess.get_outputs()]
    want = np.asarray(sess.run({"image": x})[name])
    assert np.array_equal(res.as_numpy(name).view(np.uint32), want.view(np.uint32))
    assert res.get_response()["parameters"]["batch_size"] == 2


def test_yaml_config(tmp_path: Path) -> None:
    pytest.importorskip("yaml", reason="YAML configs need pyyaml")
    write_model(tmp_path / "m", mlp_model(0))
    (tmp_path / "m" / "config.yaml").write_text(
        "max_batch_size: 4\ndynamic_batching:\n  preferred_batch_sizes: [2, 4]\n"
    )
    repo = ModelRepository(tmp_path)
    repo.load("m")
    assert repo.get("m").model.buckets == (2, 4)
    repo.close()


def test_saved_plan_is_served(tmp_path: Path) -> None:
    """A model folder may hold a saved plan (model.xrtplan) instead of the ONNX file."""
    import json

    import xpuruntime as xrt
    from xpuruntime.serving import InferRequest

    onnx_path = tmp_path / "m.onnx"
    onnx.save(mlp_model(0), str(onnx_path))
    sess = xrt.InferenceSession(str(onnx_path), device="cpu", engine="native", input_shapes={"x": [4, 16]})
    folder = tmp_path / "repo" / "planned"
    (folder / "1").mkdir(parents=True)
    sess.save_plan(str(folder / "1" / "model.xrtplan"))
    cfg = {"max_batch_size": 4, "dynamic_batching": {"preferred_batch_sizes": [4]}}
    (folder / "config.json").write_text(json.dumps(cfg))
    repo = ModelRepository(tmp_path / "repo")
    repo.load_all()
    try:
        x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
        out = repo.get("planned").infer(InferRequest("planned", "", {"x": x}))
        padded = np.concatenate([x, np.zeros((1, 16), np.float32)])  # the bucket the plan was built for
        want = np.asarray(sess.run({"x": padded})["y"])[:3]
        assert np.array_equal(out.outputs["y"].view(np.uint32), want.view(np.uint32))
        assert out.parameters["batch_size"] == 4 and out.parameters["engine"] == "native"
    finally:
        repo.close()
