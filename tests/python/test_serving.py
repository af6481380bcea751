"""xpuruntime.serving driven by the real tritonclient (HTTP and gRPC) on loopback.

Every output is compared bit for bit with InferenceSession.run on the same model; bad
requests must get the protocol's error and leave the server serving.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "tritonclient.http", reason="the serving tests need tritonclient[http,grpc] (serve extra)"
)
pytest.importorskip("uvicorn", reason="the serving tests need the serve extra (uvicorn, starlette, grpcio)")

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import xpuruntime as xrt
from serving_testlib import kernel_policy_of, make_repository, wait_until
from tritonclient.utils import InferenceServerException
from xpuruntime.serving import InferenceServer

MAX_BYTES = 1 << 20


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("models")
    return root, make_repository(root)


@pytest.fixture(scope="module")
def server(repo: tuple[Path, dict[str, Path]]):
    srv = InferenceServer(repo[0], http_port=0, grpc_port=0, max_request_bytes=MAX_BYTES, threads=8).start()
    try:
        yield srv
    finally:
        srv.stop(grace=5)


@pytest.fixture()
def hc(server: InferenceServer):
    c = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}", network_timeout=30)
    yield c
    c.close()


@pytest.fixture()
def gc(server: InferenceServer):
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    yield c
    c.close()


_REFERENCE: dict[Path, xrt.InferenceSession] = {}


def reference(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """InferenceSession.run on the model file the server serves, on the same inputs."""
    if path not in _REFERENCE:
        _REFERENCE[path] = xrt.InferenceSession(str(path), device="cpu", kernel_policy=kernel_policy_of(path))
    return {k: np.asarray(v) for k, v in _REFERENCE[path].run(feeds).items()}


def _x(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 16)).astype(np.float32)


def http_infer(c, model: str, x: np.ndarray, binary: bool, version: str = ""):
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    outs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("y", "p")]
    return c.infer(model, [inp], model_version=version, outputs=outs)


def grpc_infer(c, model: str, x: np.ndarray, version: str = ""):
    inp = grpcclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return c.infer(model, [inp], model_version=version)


def assert_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (
        "outputs differ from InferenceSession.run"
    )


# ---------------------------------------------------------------------- health, metadata
def test_health_and_server_metadata(hc, gc) -> None:
    assert hc.is_server_live() and hc.is_server_ready()
    assert gc.is_server_live() and gc.is_server_ready()
    assert hc.is_model_ready("mlp") and gc.is_model_ready("mlp", "2")
    assert not hc.is_model_ready("broken") and not gc.is_model_ready("broken")
    md = hc.get_server_metadata()
    assert md["name"] == "xpuruntime" and "model_repository" in md["extensions"]
    assert "binary_tensor_data" in gc.get_server_metadata().extensions


def test_model_metadata(hc, gc) -> None:
    md = hc.get_model_metadata("mlp")
    assert md["platform"] == "xpuruntime" and md["versions"] == ["2"]
    assert md["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 16]}]
    assert [o["name"] for o in md["outputs"]] == ["y", "p"]
    g = gc.get_model_metadata("add_int", as_json=True)
    assert g["inputs"][0] == {"name": "a", "datatype": "INT32", "shape": ["2", "3"]}


# ---------------------------------------------------------------------- inference, bit for bit
@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
@pytest.mark.parametrize(
    "model,version,key", [("mlp", "1", "mlp/1"), ("mlp", "", "mlp/2"), ("mlp_direct", "", "mlp_direct")]
)
def test_http_infer_bit_exact(hc, repo, binary, model, version, key) -> None:
    for rows, seed in ((1, 0), (3, 1), (8, 2)):
        x = _x(rows, seed)
        res = http_infer(hc, model, x, binary, version)
        want = reference(repo[1][key], {"x": x})
        assert_bits(res.as_numpy("y"), want["y"])
        assert_bits(res.as_numpy("p"), want["p"])


def test_grpc_infer_bit_exact(gc, repo) -> None:
    for model, version, key in (
        ("mlp", "1", "mlp/1"),
        ("mlp", "", "mlp/2"),
        ("mlp_direct", "", "mlp_direct"),
    ):
        x = _x(5, 7)
        res = grpc_infer(gc, model, x, version)
        want = reference(repo[1][key], {"x": x})
        assert_bits(res.as_numpy("y"), want["y"])
        assert_bits(res.as_numpy("p"), want["p"])


def test_int_model_json_and_grpc(hc, gc) -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(-1000, 1000, (2, 3)).astype(np.int32)
    b = rng.integers(-1000, 1000, (2, 3)).astype(np.int32)
    ins = [httpclient.InferInput("a", [2, 3], "INT32"), httpclient.InferInput("b", [2, 3], "INT32")]
    ins[0].set_data_from_numpy(a, binary_data=False)
    ins[1].set_data_from_numpy(b, binary_data=True)
    np.testing.assert_array_equal(hc.infer("add_int", ins).as_numpy("c"), a + b)
    gins = [grpcclient.InferInput("a", [2, 3], "INT32"), grpcclient.InferInput("b", [2, 3], "INT32")]
    gins[0].set_data_from_numpy(a)
    gins[1].set_data_from_numpy(b)
    np.testing.assert_array_equal(gc.infer("add_int", gins).as_numpy("c"), a + b)


def test_requested_output_subset(hc, gc) -> None:
    x = _x(2, 4)
    inp = httpclient.InferInput("x", [2, 16], "FP32")
    inp.set_data_from_numpy(x)
    res = hc.infer("mlp", [inp], outputs=[httpclient.InferRequestedOutput("p")])
    assert [o["name"] for o in res.get_response()["outputs"]] == ["p"]
    gin = grpcclient.InferInput("x", [2, 16], "FP32")
    gin.set_data_from_numpy(x)
    gres = gc.infer("mlp", [gin], outputs=[grpcclient.InferRequestedOutput("y")])
    assert [o.name for o in gres.get_response().outputs] == ["y"]


# ---------------------------------------------------------------------- provenance, explain
def test_provenance_parameters(hc, gc, repo) -> None:
    sess = xrt.InferenceSession(str(repo[1]["mlp/2"]), device="cpu")
    kp = kernel_policy_of(repo[1]["mlp/2"])
    assert kp is not None
    fp = hashlib.sha256(f"{kp.fingerprint}:{xrt.ExecutionPolicy().fingerprint}".encode()).hexdigest()
    default_fp = hashlib.sha256(
        f"{xrt.KernelPolicy().fingerprint}:{xrt.ExecutionPolicy().fingerprint}".encode()
    ).hexdigest()
    p = http_infer(hc, "mlp", _x(3, 5), True).get_response()["parameters"]
    assert p["engine"] == sess.engine and p["device"] == sess.device
    assert p["batch_size"] in (4, 8) and p["batch_requests"] >= 1  # 3 rows run in a bucket
    assert p["queue_time_us"] >= 0 and p["compute_time_us"] > 0
    assert p["policy_fingerprint"] == fp and p["model_version"] == "2"
    gp = grpc_infer(gc, "mlp_direct", _x(1, 6)).get_response().parameters
    assert gp["engine"].string_param == sess.engine
    assert gp["batch_size"].int64_param == 1 and gp["batch_requests"].int64_param == 1
    assert gp["policy_fingerprint"].string_param == default_fp != fp


def _get(server: InferenceServer, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def _post(
    server: InferenceServer, path: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    try:
        conn.request("POST", path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_explain_returns_the_sessions_decisions(server, repo) -> None:
    status, body = _get(server, "/v2/models/mlp/versions/1/explain")
    assert status == 200
    doc = json.loads(body)
    sess = xrt.InferenceSession(
        str(repo[1]["mlp/1"]), device="cpu", kernel_policy=kernel_policy_of(repo[1]["mlp/1"])
    )
    sess.run({"x": _x(1, 0)})
    want = [(d.op, d.chosen) for d in sess.explain()]
    got = [(d["op"], d["chosen"]) for d in doc["decisions"]]
    assert got and set(want) <= set(got), (got, want)
    assert doc["engine"] == sess.engine and doc["model_version"] == "1"
    assert _get(server, "/v2/models/nope/explain")[0] == 404


# ---------------------------------------------------------------------- repository extension
def test_repository_index_load_unload(hc, gc) -> None:
    index = {(m["name"], m.get("version", "")): m for m in hc.get_model_repository_index()}
    assert index[("mlp", "1")]["state"] == "READY" and index[("mlp", "2")]["state"] == "READY"
    assert index[("broken", "")]["state"] == "UNAVAILABLE" and "broken" in index[("broken", "")]["reason"]
    bad = index[("bad_config", "")]
    assert bad["state"] == "UNAVAILABLE" and "max_batch_size" in bad["reason"]

    hc.unload_model("mlp_direct")
    assert not hc.is_model_ready("mlp_direct")
    with pytest.raises(InferenceServerException, match="not loaded"):
        http_infer(hc, "mlp_direct", _x(1, 0), True)
    gc.load_model("mlp_direct")
    assert hc.is_model_ready("mlp_direct")
    http_infer(hc, "mlp_direct", _x(1, 0), True)
    gc.unload_model("mlp_direct")
    assert not gc.is_model_ready("mlp_direct")
    hc.load_model("mlp_direct")
    assert gc.is_model_ready("mlp_direct")
    names = {m.name for m in gc.get_model_repository_index().models}
    assert {"mlp", "mlp_direct", "broken", "add_int"} <= names
    with pytest.raises(InferenceServerException, match="failed to load|not valid|onnx"):
        hc.load_model("broken")
    with pytest.raises(InferenceServerException, match="not in the repository"):
        gc.load_model("no_such_model")


# ---------------------------------------------------------------------- bad requests
def _still_serving(hc, gc) -> None:
    x = _x(2, 9)
    assert http_infer(hc, "mlp", x, True).as_numpy("y").shape == (2, 8)
    assert grpc_infer(gc, "mlp", x).as_numpy("y").shape == (2, 8)


@pytest.mark.parametrize(
    "name,datatype,shape,data,match",
    [
        ("z", "FP32", [1, 16], np.zeros((1, 16), np.float32), "unknown input 'z'"),
        ("x", "FP64", [1, 16], np.zeros((1, 16), np.float64), "datatype FP64, the model expects FP32"),
        (
            "x",
            "FP32",
            [1, 15],
            np.zeros((1, 15), np.float32),
            r"shape \[1, 15\], the model expects \[-1, 16\] \(-1: any size; the first is the batch size, 1..8\)",
        ),
        ("x", "FP32", [9, 16], np.zeros((9, 16), np.float32), "batch size 9 is outside 1..8"),
    ],
    ids=["name", "dtype", "shape", "batch"],
)
def test_bad_tensors_get_protocol_errors(hc, gc, name, datatype, shape, data, match) -> None:
    for binary in (False, True):
        inp = httpclient.InferInput(name, shape, datatype)
        inp.set_data_from_numpy(data, binary_data=binary)
        with pytest.raises(InferenceServerException, match=match):
            hc.infer("mlp", [inp])
    ginp = grpcclient.InferInput(name, shape, datatype)
    ginp.set_data_from_numpy(data)
    with pytest.raises(InferenceServerException, match=match) as err:
        gc.infer("mlp", [ginp])
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
    _still_serving(hc, gc)


def test_unknown_model_and_version(hc, gc) -> None:
    with pytest.raises(InferenceServerException, match="not in the repository"):
        http_infer(hc, "nope", _x(1, 0), True)
    with pytest.raises(InferenceServerException, match="not in the repository") as err:
        grpc_infer(gc, "nope", _x(1, 0))
    assert err.value.status() == "StatusCode.NOT_FOUND"
    with pytest.raises(InferenceServerException, match="has no version 7"):
        http_infer(hc, "mlp", _x(1, 0), True, version="7")
    with pytest.raises(InferenceServerException, match="not ready"):
        grpc_infer(gc, "broken", _x(1, 0))
    _still_serving(hc, gc)


def test_malformed_and_truncated_rest_bodies(server, hc, gc) -> None:
    url = "/v2/models/mlp/infer"
    status, body = _post(server, url, b'{"inputs": [ {"name": "x", ')
    assert status == 400 and "not valid JSON" in json.loads(body)["error"]
    status, body = _post(
        server, url, b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 16], "data": [1, 2]}]}'
    )
    assert status == 400 and "2 elements of data for shape [1, 16]" in json.loads(body)["error"]
    head = json.dumps(
        {
            "inputs": [
                {"name": "x", "datatype": "FP32", "shape": [1, 16], "parameters": {"binary_data_size": 64}}
            ]
        }
    ).encode()
    status, body = _post(server, url, head + b"\0" * 40, {"Inference-Header-Content-Length": str(len(head))})
    assert status == 400 and "truncated" in json.loads(body)["error"]
    status, body = _post(
        server, url, head + b"\0" * 64, {"Inference-Header-Content-Length": str(len(head) + 999)}
    )
    assert status == 400 and "Inference-Header-Content-Length" in json.loads(body)["error"]
    status, body = _post(server, url, b"[1, 2]")
    assert status == 400 and "JSON object" in json.loads(body)["error"]
    _still_serving(hc, gc)


def test_oversized_requests(server, hc, gc) -> None:
    status, body = _post(server, "/v2/models/mlp/infer", b" " * (MAX_BYTES + 1))
    assert status == 413 and "limit" in json.loads(body)["error"]
    big = np.zeros((8, (MAX_BYTES // 32) + 16), np.float32)  # > 1 MiB
    ginp = grpcclient.InferInput("x", list(big.shape), "FP32")
    ginp.set_data_from_numpy(big)
    with pytest.raises(InferenceServerException) as err:
        gc.infer("mlp", [ginp])
    assert err.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
    _still_serving(hc, gc)


# ---------------------------------------------------------------------- batching, back-pressure
def test_concurrent_requests_are_batched_bit_exact(server, repo) -> None:
    results: list[tuple[np.ndarray, np.ndarray, dict]] = []
    errors: list[BaseException] = []

    def client(seed: int) -> None:
        c = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        try:
            for k in range(6):
                x = _x(1 + (seed + k) % 3, 100 * seed + k)
                r = http_infer(c, "mlp", x, True, "1")
                results.append((x, r.as_numpy("y"), r.get_response()["parameters"]))
        except Exception as exc:  # noqa: BLE001 - surfaced by the assert below
            errors.append(exc)
        finally:
            c.close()

    threads = [threading.Thread(target=client, args=(s,)) for s in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]
    assert len(results) == 72
    for x, y, _ in results:
        assert_bits(y, reference(repo[1]["mlp/1"], {"x": x})["y"])
    assert max(p["batch_requests"] for _, _, p in results) > 1, "no two requests were ever batched"
    assert all(p["batch_size"] in (1, 2, 4, 8) for _, _, p in results)


def test_full_queue_answers_503_and_resource_exhausted(server, hc, gc) -> None:
    # mlp_tinyqueue holds one request for up to 1.5 s waiting for 8 rows.
    first = threading.Thread(
        target=lambda: http_infer(
            httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}"), "mlp_tinyqueue", _x(1, 0), True
        )
    )
    first.start()
    sched = server.repository.get("mlp_tinyqueue")
    wait_until(lambda: sched.queue_depth() == 1, what="the first request to be queued")
    with pytest.raises(InferenceServerException, match="queue is full") as err:
        http_infer(hc, "mlp_tinyqueue", _x(1, 1), True)
    assert "503" in str(err.value.status())
    with pytest.raises(InferenceServerException, match="queue is full") as gerr:
        grpc_infer(gc, "mlp_tinyqueue", _x(1, 2))
    assert gerr.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
    first.join(10)
    assert grpc_infer(gc, "mlp_tinyqueue", _x(1, 3)).as_numpy("y").shape == (1, 8)


def test_metrics_endpoint(server, hc) -> None:
    http_infer(hc, "mlp", _x(1, 0), True)
    with pytest.raises(InferenceServerException):
        http_infer(hc, "no_such_model_for_metrics", _x(1, 0), True)
    status, body = _get(server, "/metrics")
    text = body.decode()
    assert status == 200
    assert 'xrt_inference_requests_total{model="mlp"' in text
    assert "xrt_inference_compute_seconds_bucket" in text and "xrt_inference_batch_size_count" in text
    assert "xrt_inference_failures_total{" in text
    assert 'xrt_device_memory_allocated_bytes{device="cpu"}' in text
    assert "no_such_model_for_metrics" not in text  # names from bad requests never become labels
    # A request that names no version is counted under the version that served it.
    served = re.search(r'xrt_inference_requests_total\{model="mlp",protocol="rest",version="2"\} (\S+)', text)
    assert served is not None and float(served.group(1)) >= 1


# ---------------------------------------------------------------------- less common wire forms
def test_grpc_response_from_cached_prefix_parses_as_the_whole_message() -> None:
    """render_infer's cached shared-parameter prefix + per-response fields == the message built whole."""
    from xpuruntime.serving.grpc_service import messages, render_infer
    from xpuruntime.serving.protocol import InferResponse, SharedParameters

    rng = np.random.default_rng(7)
    shared = SharedParameters({"engine": "native", "device": "cpu", "batch_size": 4, "flag": True})
    outs = {
        "y": rng.standard_normal((4, 3)).astype(np.float32),
        "i": rng.integers(-9, 9, (4,)).astype(np.int64),
        "h": rng.standard_normal((2, 2)).astype(np.float16),
    }
    params = {**shared.values, "batch_requests": 3, "queue_time_us": 17, "ratio": 0.25}
    want = messages()["ModelInferResponse"](model_name="m", model_version="2", id="req-1")
    for k, v in params.items():
        p = want.parameters[k]
        if isinstance(v, bool):
            p.bool_param = v
        elif isinstance(v, int):
            p.int64_param = v
        elif isinstance(v, float):
            p.double_param = v
        else:
            p.string_param = v
    for name, arr in outs.items():
        o = want.outputs.add()
        o.name, o.datatype = name, {"y": "FP32", "i": "INT64", "h": "FP16"}[name]
        o.shape.extend(arr.shape)
        want.raw_output_contents.append(arr.tobytes())
    for _ in range(2):  # the second response reuses the prefix cached by the first
        resp = InferResponse("m", "2", outs, dict(params), "req-1", shared)
        got = messages()["ModelInferResponse"].FromString(render_infer(resp, raw=True))
        assert got == want
    assert len(shared.encoded) == 1
    plain = InferResponse("m", "2", outs, dict(params), "req-1")  # no shared part: built whole
    assert messages()["ModelInferResponse"].FromString(render_infer(plain, raw=True)) == want


def test_grpc_typed_contents_and_raw_count(server, repo) -> None:
    """Typed InferTensorContents in, typed contents out; a raw buffer count that disagrees is refused."""
    import grpc
    from xpuruntime.serving.grpc_service import messages

    msgs = messages()
    x = _x(2, 11)
    req = msgs["ModelInferRequest"](model_name="mlp_direct")
    t = req.inputs.add()
    t.name, t.datatype = "x", "FP32"
    t.shape.extend(x.shape)
    t.contents.fp32_contents.extend(x.reshape(-1).tolist())
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        call = ch.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=msgs["ModelInferResponse"].FromString,
        )
        resp = call(req, timeout=30)
        assert not resp.raw_output_contents
        y = {
            o.name: np.asarray(o.contents.fp32_contents, np.float32).reshape(tuple(o.shape))
            for o in resp.outputs
        }
        assert_bits(y["y"], reference(repo[1]["mlp_direct"], {"x": x})["y"])
        bad = msgs["ModelInferRequest"]()
        bad.CopyFrom(req)
        bad.raw_input_contents.extend([x.tobytes(), x.tobytes()])
        with pytest.raises(grpc.RpcError) as err:
            call(bad, timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "2 raw_input_contents for 1 inputs" in err.value.details()


def test_http_gzip_request_body(hc, repo) -> None:
    x = _x(3, 12)
    inp = httpclient.InferInput("x", [3, 16], "FP32")
    inp.set_data_from_numpy(x)
    res = hc.infer("mlp_direct", [inp], request_compression_algorithm="gzip")
    assert_bits(res.as_numpy("y"), reference(repo[1]["mlp_direct"], {"x": x})["y"])


def test_random_bodies_never_break_the_server(server, hc, gc) -> None:
    """Random bytes, random JSON and mangled valid requests: each a 4xx with a message."""
    rng = np.random.default_rng(1234)
    good = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16}]}
    mutations = [
        lambda d: d["inputs"][0].update(shape=[16]),
        lambda d: d["inputs"][0].update(shape="1,16"),
        lambda d: d["inputs"][0].update(shape=[1, -16]),
        lambda d: d["inputs"][0].update(datatype="BYTES"),
        lambda d: d["inputs"][0].update(datatype=7),
        lambda d: d["inputs"][0].update(data=[[0.5] * 8, [0.5] * 9]),
        lambda d: d["inputs"][0].update(data=["a"] * 16),
        lambda d: d["inputs"][0].update(parameters={"binary_data_size": -1}),
        lambda d: d["inputs"][0].update(parameters={"binary_data_size": True}),
        lambda d: d["inputs"][0].pop("data"),
        lambda d: d["inputs"].append(dict(d["inputs"][0])),
        lambda d: d.update(inputs=[]),
        lambda d: d.update(inputs={"x": 1}),
        lambda d: d.update(outputs=[{"name": "nope"}]),
        lambda d: d.update(outputs="y"),
        lambda d: d.update(parameters=[1]),
    ]
    bodies = [bytes(rng.integers(0, 256, int(n), dtype=np.uint8)) for n in rng.integers(0, 300, 10)]
    for mutate in mutations:
        d = json.loads(json.dumps(good))
        mutate(d)
        bodies.append(json.dumps(d).encode())
    for body in bodies:
        status, reply = _post(server, "/v2/models/mlp/infer", body)
        assert 400 <= status < 500, (body[:80], status, reply[:200])
        assert json.loads(reply)["error"], reply
    _still_serving(hc, gc)
