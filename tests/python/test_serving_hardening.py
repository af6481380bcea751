"""Nothing a client sends takes the server down or learns about the host (issue 35).

Each class of hostile request the outside probe found gets a test here, and each test
ends with correct requests answered correctly (``_still_serving``: REST and gRPC, the
numbers checked against NumPy float64): deeply nested JSON, YAML alias bombs in a
config and a policy, encoded paths and names that are paths, lax data (INT64 1.7,
FP16 1e6, "0.5" for FP32, "binary_data": "false"), NaN/inf outputs over JSON, a
20,000-character name, a non-digit Inference-Header-Content-Length, pipelined requests
on one connection, config limits. The server listens on 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import socket
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("uvicorn", reason="the serving tests need the serve extra (uvicorn, starlette, grpcio)")
pytest.importorskip("onnx")
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException
from xpuruntime.serving import InferenceServer

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "server_request_fuzzer", ROOT / "fuzz" / "server_request_fuzzer.py"
)
fuzzer = importlib.util.module_from_spec(_spec)
sys.modules["server_request_fuzzer"] = fuzzer
_spec.loader.exec_module(fuzzer)

MAX_BYTES = 4 << 20
W = fuzzer._W.astype(np.float64)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("models")
    fuzzer.build_repository(root)
    t0 = time.monotonic()
    srv = InferenceServer(root, http_port=0, grpc_port=0, max_request_bytes=MAX_BYTES, threads=4).start()
    srv.start_seconds = time.monotonic() - t0
    try:
        yield srv
    finally:
        srv.stop(grace=5)


@pytest.fixture()
def gc(server: InferenceServer):
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    yield c
    c.close()


def _raw(
    server: InferenceServer, request: bytes, want: int = 1, timeout: float = 20.0
) -> list[tuple[int, bytes]]:
    """Send raw bytes on one connection; the (status, body) of the first ``want`` responses."""
    out: list[tuple[int, bytes]] = []
    buf = b""
    deadline = time.monotonic() + timeout
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=timeout) as s:
        s.sendall(request)
        while len(out) < want:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                head = buf[:end].decode("latin-1").split("\r\n")
                fields = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in head[1:])}
                n = int(fields.get("content-length", "0"))
                if len(buf) >= end + 4 + n:
                    out.append((int(head[0].split()[1]), buf[end + 4 : end + 4 + n]))
                    buf = buf[end + 4 + n :]
                    continue
            s.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            buf += chunk
    return out


def _post(
    server: InferenceServer, path: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, dict]:
    got = _raw(server, fuzzer._http("POST", path, body, headers))
    assert got, f"no answer to POST {path}"
    status, reply = got[0]
    return status, json.loads(reply)


def _infer_doc(x: np.ndarray) -> dict:
    return {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape), "data": x.reshape(-1).tolist()}]
    }


def _still_serving(server: InferenceServer, gc) -> None:
    """A correct request over REST and over gRPC, each answered with the right numbers."""
    x = np.random.default_rng(int(time.monotonic_ns() % 2**32)).standard_normal((3, 4)).astype(np.float32)
    want = x.astype(np.float64) @ W
    status, doc = _post(server, "/v2/models/probe/infer", json.dumps(_infer_doc(x)).encode())
    assert status == 200, doc
    got = np.asarray(doc["outputs"][0]["data"], np.float64).reshape(3, 3)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    inp = grpcclient.InferInput("x", [3, 4], "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_allclose(gc.infer("probe", [inp]).as_numpy("y"), want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------- bounded parsing
@pytest.mark.parametrize(
    "path,body",
    [
        ("/v2/models/probe/infer", b"[" * 1_000_000 + b"]" * 1_000_000),
        (
            "/v2/models/probe/infer",
            b'{"id": ' + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b', "inputs": []}',
        ),
        ("/v2/models/probe/infer", b'{"id": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
        ("/v2/repository/index", b"[" * 1_000_000 + b"]" * 1_000_000),
        ("/v2/repository/index", b'{"ready": ' + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"}"),
    ],
    ids=["arrays-1e6", "id-objects-1e5", "id-5000", "index-arrays-1e6", "index-objects-1e5"],
)
def test_deeply_nested_json_is_refused(server, gc, path, body) -> None:
    status, doc = _post(server, path, body)
    assert status == 400 and "levels deep" in doc["error"], (status, doc)
    _still_serving(server, gc)


def test_json_depth_matches_a_parser() -> None:
    """protocol.json_depth against the depth of what json.loads builds, strings with brackets included."""
    from xpuruntime.serving.protocol import MAX_JSON_DEPTH, json_depth

    def depth(o) -> int:
        if isinstance(o, list):
            return 1 + max((depth(v) for v in o), default=0)
        if isinstance(o, dict):
            return 1 + max((depth(v) for v in o.values()), default=0)
        return 0

    rng = np.random.default_rng(35)
    tricky = ["[", "]", "{", "}", '\\"[', "\\\\", '"', 'a\\\\\\"]']

    def build(d: int):
        if d == 0:
            return (
                str(rng.choice(tricky)) * int(rng.integers(0, 5))
                if rng.random() < 0.5
                else float(rng.random())
            )
        # one child nests on, its siblings are shallow (the size stays linear in d)
        k = rng.random()
        if k < 0.3:
            return [build(d - 1), *[build(int(rng.integers(0, 3))) for _ in range(int(rng.integers(0, 2)))]]
        if k < 0.6:
            keys = [str(rng.choice(tricky)) + str(i) for i in range(int(rng.integers(1, 3)))]
            return {kk: build(d - 1 if i == 0 else int(rng.integers(0, 3))) for i, kk in enumerate(keys)}
        return [build(d - 1)]

    for _ in range(200):
        doc = build(int(rng.integers(0, 100)))
        text = json.dumps(doc).encode()
        got, want = json_depth(text, 0), depth(doc)
        assert got == want, (got, want, text[:200])
        assert (json_depth(text) > MAX_JSON_DEPTH) == (want > MAX_JSON_DEPTH)
    t0 = time.perf_counter()
    assert json_depth(b"[" * 4_000_000) == 4_000_000
    assert time.perf_counter() - t0 < 5.0


def test_yaml_alias_bombs_are_refused_fast(server, gc, tmp_path) -> None:
    # the repository's bomb config (9 aliases x 9 levels: 387 million nodes expanded)
    assert server.start_seconds < 60
    index = {m["name"]: m for m in _post(server, "/v2/repository/index", b"")[1]}
    assert index["bomb"]["state"] == "UNAVAILABLE" and "aliases" in index["bomb"]["reason"]
    assert str(server.repository.root) not in index["bomb"]["reason"]  # no host path to clients
    t0 = time.monotonic()
    status, doc = _post(server, "/v2/repository/models/bomb/load", b"")
    assert status == 400 and "YAML aliases" in doc["error"] and time.monotonic() - t0 < 5, doc
    # the same bomb as a policy file
    import xpuruntime as xrt

    bomb = "matmul: &a [x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 20)}]\n" for p, c in zip("abcdef", "bcdefg")
    )
    (tmp_path / "kp.yaml").write_text(bomb)
    t0 = time.monotonic()
    for cls in (xrt.KernelPolicy, xrt.ExecutionPolicy):
        with pytest.raises(xrt.PolicyError, match="YAML aliases"):
            cls.load(tmp_path / "kp.yaml")
    assert time.monotonic() - t0 < 5
    # plain YAML (anchors without aliases are harmless) still loads
    (tmp_path / "ok.yaml").write_text("threads: &t 2\n")
    assert xrt.ExecutionPolicy.load(tmp_path / "ok.yaml").threads == 2
    (tmp_path / "deep.yaml").write_text("threads: " + "[" * 200 + "]" * 200 + "\n")
    with pytest.raises(xrt.PolicyError, match="levels deep"):
        xrt.ExecutionPolicy.load(tmp_path / "deep.yaml")
    _still_serving(server, gc)


# ---------------------------------------------------------------------- names are names
def test_encoded_paths_answer_like_any_invalid_name(server, gc) -> None:
    """Whatever exists on the host's disk, the answer depends on the name only."""
    x = json.dumps(_infer_doc(np.zeros((1, 4), np.float32))).encode()
    answers = {}
    for name in ("%252Fetc", "%252Fno_such_dir_xyz", "..%252F..%252Fetc", "%252E%252E", "%2525252Fetc"):
        status, doc = _post(server, f"/v2/models/{name}/infer", x)
        assert status == 400 and "not a valid model name" in doc["error"], (name, status, doc)
        answers[name] = (status, doc["error"].split(" is not a valid")[1])
    assert len(set(answers.values())) == 1
    # %2F is decoded once, by the HTTP server: the path then names no endpoint
    for name in ("%2Fetc", "%2Fno_such_dir_xyz", "..%2F..%2Fetc"):
        status, doc = _post(server, f"/v2/models/{name}/infer", x)
        assert status == 404 and doc == {
            "error": "no endpoint of the Open Inference Protocol has this path; see GET /v2"
        }
    # valid names that are no model answer 404 the same way, a folder on the host or not
    for name in ("etc", "usr", "no_such_dir_xyz"):
        status, doc = _post(server, f"/v2/models/{name}/infer", x)
        assert status == 404 and "not in the repository" in doc["error"], (name, status, doc)
    # gRPC: names are not decoded at all; "/etc" and "/nonexistent" get the same answer
    codes = {}
    for name in ("/etc", "/no_such_dir_xyz", "../../etc", "/etc/passwd"):
        with pytest.raises(InferenceServerException) as err:
            gc.get_model_metadata(name)
        codes[name] = (err.value.status(), err.value.message().split(" is not a valid")[1])
        assert err.value.status() == "StatusCode.INVALID_ARGUMENT", codes
        with pytest.raises(InferenceServerException, match="not a valid model name"):
            gc.load_model(name)
        assert not gc.is_model_ready(name)
    assert len(set(codes.values())) == 1
    for name in ("etc", "no_such_dir_xyz"):
        with pytest.raises(InferenceServerException) as err:
            gc.get_model_metadata(name)
        assert err.value.status() == "StatusCode.NOT_FOUND"
    _still_serving(server, gc)


def test_a_20000_character_name_is_a_400_with_a_message(server, gc) -> None:
    name = "m" * 20_000
    status, doc = _post(server, f"/v2/models/{name}/infer", b"{}")
    assert status == 400 and "(20000 characters)" in doc["error"] and len(doc["error"]) < 1000
    got = _raw(server, fuzzer._http("GET", f"/v2/models/{name}"))
    assert got[0][0] == 400
    status, doc = _post(server, f"/v2/repository/models/{name}/load", b"")
    assert status == 400 and "not a valid model name" in doc["error"]
    with pytest.raises(InferenceServerException, match="not a valid model name"):
        gc.get_model_metadata(name)
    _still_serving(server, gc)


# ---------------------------------------------------------------------- strict data
@pytest.mark.parametrize(
    "tensor,match",
    [
        (
            {"name": "a", "datatype": "INT32", "shape": [2, 3], "data": [1.7, 1, 1, 1, 1, 1]},
            "must be integers, got 1.7",
        ),
        ({"name": "a", "datatype": "INT32", "shape": [2, 3], "data": [2**40] * 6}, "outside"),
        ({"name": "a", "datatype": "INT32", "shape": [2, 3], "data": ["1"] * 6}, "must be JSON numbers"),
        ({"name": "a", "datatype": "INT32", "shape": [2, 3], "data": [True] * 6}, "must be JSON numbers"),
    ],
    ids=["int-fraction", "int-range", "int-string", "int-bool"],
)
def test_integer_data_is_strict(server, gc, tensor, match) -> None:
    b = {"name": "b", "datatype": "INT32", "shape": [2, 3], "data": [1] * 6}
    status, doc = _post(server, "/v2/models/add_int/infer", json.dumps({"inputs": [tensor, b]}).encode())
    assert status == 400 and match in doc["error"], doc
    _still_serving(server, gc)


@pytest.mark.parametrize(
    "datatype,data,match",
    [
        ("FP16", [1e6, 0, 0, 0], "beyond the datatype's range"),
        ("FP32", [1e39, 0, 0, 0], "beyond the datatype's range"),
        ("FP32", ["0.5", "0.5", "0.5", "0.5"], "must be JSON numbers"),
        ("FP32", [0.5, None, 0.5, 0.5], "must be JSON numbers"),
        ("BOOL", [1, 0, 1, 0], "BOOL data must be JSON true/false"),
    ],
    ids=["fp16-range", "fp32-range", "fp32-strings", "fp32-null", "bool-ints"],
)
def test_float_and_bool_data_is_strict(server, gc, datatype, data, match) -> None:
    doc = {"inputs": [{"name": "x", "datatype": datatype, "shape": [1, 4], "data": data}]}
    status, reply = _post(server, "/v2/models/probe/infer", json.dumps(doc).encode())
    assert status == 400 and match in reply["error"], reply
    _still_serving(server, gc)


def test_int_data_in_range_and_fp16_max_are_taken(server, gc) -> None:
    a = np.random.default_rng(5).integers(-(2**30), 2**30, (2, 3)).astype(np.int32)
    b = np.random.default_rng(6).integers(-(2**30), 2**30, (2, 3)).astype(np.int32)
    doc = {
        "inputs": [
            {"name": n, "datatype": "INT32", "shape": [2, 3], "data": v.reshape(-1).tolist()}
            for n, v in (("a", a), ("b", b))
        ]
    }
    status, reply = _post(server, "/v2/models/add_int/infer", json.dumps(doc).encode())
    assert status == 200, reply
    want = a.astype(np.int64) + b.astype(np.int64)
    np.testing.assert_array_equal(np.asarray(reply["outputs"][0]["data"]).reshape(2, 3), want)
    from xpuruntime.serving.protocol import array_from_list

    got = array_from_list([65504.0, -65504.0, 1e-8, 0.1], np.dtype(np.float16), (4,), "x")
    np.testing.assert_array_equal(got, np.array([65504.0, -65504.0, 1e-8, 0.1], np.float16))
    _still_serving(server, gc)


@pytest.mark.parametrize(
    "mutate,match",
    [
        (
            lambda d: d["outputs"][0]["parameters"].update(binary_data="false"),
            "'binary_data' must be true or false",
        ),
        (
            lambda d: d.update(parameters={"binary_data_output": "false"}),
            "'binary_data_output' must be true or false",
        ),
        (
            lambda d: d.update(parameters={"binary_data_output": 1}),
            "'binary_data_output' must be true or false",
        ),
        (lambda d: d.update(id={"a": 1}), "'id' must be a string"),
        (lambda d: d.update(id=7), "'id' must be a string"),
    ],
    ids=["binary_data-string", "binary_data_output-string", "binary_data_output-int", "id-object", "id-int"],
)
def test_boolean_parameters_and_id_are_strict(server, gc, mutate, match) -> None:
    doc = _infer_doc(np.ones((1, 4), np.float32))
    doc["outputs"] = [{"name": "y", "parameters": {"binary_data": False}}]
    mutate(doc)
    status, reply = _post(server, "/v2/models/probe/infer", json.dumps(doc).encode())
    assert status == 400 and match in reply["error"], reply
    _still_serving(server, gc)


def test_nan_and_inf_outputs_need_binary_data(server, gc) -> None:
    """JSON has no NaN or infinity: such an output is refused over JSON, exact in binary."""
    x = np.array([-1.0, 0.0, 2.5, np.float32(np.e)], np.float32)
    doc = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [4], "data": x.tolist()}]}
    status, reply = _post(server, "/v2/models/log/infer", json.dumps(doc).encode())
    assert status == 400 and "JSON cannot represent" in reply["error"] and "binary_data" in reply["error"]
    doc["outputs"] = [{"name": "y", "parameters": {"binary_data": True}}]
    got = _raw(server, fuzzer._http("POST", "/v2/models/log/infer", json.dumps(doc).encode()))
    status, body = got[0]
    assert status == 200
    head_len = len(body) - 16
    meta = json.loads(body[:head_len])
    assert meta["outputs"][0]["parameters"]["binary_data_size"] == 16
    y = np.frombuffer(body[head_len:], np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.log(x.astype(np.float64))
    assert np.isnan(y[0]) and y[1] == -np.inf
    np.testing.assert_allclose(y[2:], want[2:], rtol=1e-6)
    # finite outputs stay JSON numbers
    doc = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [4], "data": [1.0, 2.0, 3.0, 4.0]}]}
    status, reply = _post(server, "/v2/models/log/infer", json.dumps(doc).encode())
    assert status == 200
    np.testing.assert_allclose(reply["outputs"][0]["data"], np.log([1.0, 2.0, 3.0, 4.0]), rtol=1e-6)
    _still_serving(server, gc)


# ---------------------------------------------------------------------- headers, pipelining
@pytest.mark.parametrize("value", ["\xb2", "12a", "-1", " 5x", "0x10", "99999999999999999999999"])
def test_bad_inference_header_content_length(server, gc, value) -> None:
    body = json.dumps(_infer_doc(np.ones((1, 4), np.float32))).encode()
    status, doc = _post(server, "/v2/models/probe/infer", body, {"Inference-Header-Content-Length": value})
    assert status == 400 and "Inference-Header-Content-Length" in doc["error"], doc
    _still_serving(server, gc)


def test_pipelined_requests_are_all_answered(server, gc) -> None:
    x1 = np.random.default_rng(11).standard_normal((1, 4)).astype(np.float32)
    x2 = np.random.default_rng(12).standard_normal((2, 4)).astype(np.float32)
    reqs = [
        fuzzer._http("GET", "/v2/health/live"),
        fuzzer._http("POST", "/v2/models/probe/infer", json.dumps(_infer_doc(x1)).encode()),
        fuzzer._http("POST", "/v2/models/nope/infer", b"{}"),
        fuzzer._http("POST", "/v2/models/probe/infer", json.dumps(_infer_doc(x2)).encode()),
    ]
    got = _raw(server, b"".join(reqs), want=4)
    assert [s for s, _ in got] == [200, 200, 404, 200]
    for (_, body), x in ((got[1], x1), (got[3], x2)):
        y = np.asarray(json.loads(body)["outputs"][0]["data"], np.float64).reshape(x.shape[0], 3)
        np.testing.assert_allclose(y, x.astype(np.float64) @ W, rtol=1e-5, atol=1e-5)
    _still_serving(server, gc)


# ---------------------------------------------------------------------- config limits
def test_config_limits_are_typed_errors(server, gc) -> None:
    index = {m["name"]: m for m in _post(server, "/v2/repository/index", b"")[1]}
    assert index["many"]["state"] == "UNAVAILABLE"
    assert "instances must be an integer >= 1 and <= 64, got 100000" in index["many"]["reason"]
    status, doc = _post(server, "/v2/repository/models/many/load", b"")
    assert status == 400 and "instances" in doc["error"]
    from xpuruntime.serving.config import ConfigError, ModelConfig

    for cfg, match in [
        ({"max_batch_size": 10**9}, "max_batch_size must be an integer >= 0 and <= 65536"),
        ({"max_batch_size": 8, "dynamic_batching": {"max_queue_size": 10**12}}, "max_queue_size"),
        ({"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_us": 10**12}}, "max_queue_delay_us"),
        (
            {"max_batch_size": 8, "dynamic_batching": {"preferred_batch_sizes": list(range(1, 9)) * 9}},
            "at most 64",
        ),
        ({"versions": list(range(1, 100))}, "versions"),
        ({"model_file": "../../etc/passwd"}, "inside the model's folder"),
        ({"kernel_policy": "/etc/passwd"}, "inside the model's folder"),
        ({"instances": True}, "instances"),
    ]:
        with pytest.raises(ConfigError, match=match):
            ModelConfig.from_dict(cfg, "m", "m/config.json")
    assert ModelConfig.from_dict({"instances": 64, "max_batch_size": 65536}, "m", "w").buckets()[-1] == 65536
    _still_serving(server, gc)


def test_server_fuzzer_corpus_replays_clean(server, gc) -> None:
    """The committed corpus of fuzz/server_request_fuzzer.py against this server."""
    target = fuzzer.Target.__new__(fuzzer.Target)
    target.server = server
    import grpc

    target.channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    try:
        files = sorted(fuzzer.CORPUS.glob("*.json"))
        assert len(files) >= 20
        failures = [(f.name, why) for f in files if (why := target.run(json.loads(f.read_text())))]
    finally:
        target.channel.close()
    assert not failures, failures
    _still_serving(server, gc)


def test_corpus_cases_are_well_formed() -> None:
    for f in sorted(fuzzer.CORPUS.glob("*.json")):
        case = json.loads(f.read_text())
        assert case["kind"] in ("http", "grpc")
        base64.b64decode(case["raw" if case["kind"] == "http" else "message"], validate=True)
