"""What the outside probe of 2026-11-29 (issue 35, second round) found in the server, each
class followed by correct requests answered correctly (REST and gRPC, numbers against NumPy):

- a run failing on the request's data (a Gather index out of range) answered 500 INTERNAL with
  a C++ source location, and failed every request batched with it;
- a run needing more memory than the server has answered 500;
- UNAVAILABLE reasons and load errors carried the repository's absolute path on the host;
- load requests with Triton's ``config`` / ``file:`` parameters were answered 200 and the
  parameters ignored;
- gRPC inputs with both raw and typed contents were taken (the typed ones ignored);
- UINT64 JSON data above 2**63 beside small values was refused as a float.

Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import concurrent.futures
import json
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("uvicorn", reason="the serving tests need the serve extra (uvicorn, starlette, grpcio)")
pytest.importorskip("onnx")
import onnx
import tritonclient.grpc as grpcclient
from onnx import TensorProto, helper, numpy_helper
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException
from xpuruntime.serving import InferenceServer

TABLE = np.random.default_rng(35).standard_normal((100, 8)).astype(np.float32)
W = np.random.default_rng(36).standard_normal((4, 3)).astype(np.float32)


def _save(folder: Path, graph: onnx.GraphProto, config: dict | None = None) -> None:
    (folder / "1").mkdir(parents=True)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(folder / "1" / "model.onnx"))
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("probe_repo")
    vi = helper.make_tensor_value_info
    _save(
        root / "probe",
        helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])],
            "probe",
            [vi("x", TensorProto.FLOAT, ["n", 4])],
            [vi("y", TensorProto.FLOAT, ["n", 3])],
            [numpy_helper.from_array(W, "w")],
        ),
        {"max_batch_size": 8},
    )
    # an embedding lookup (a BERT's first step), batched: requests share a run
    _save(
        root / "embed",
        helper.make_graph(
            [helper.make_node("Gather", ["t", "ids"], ["y"])],
            "embed",
            [vi("ids", TensorProto.INT64, ["batch", 3])],
            [vi("y", TensorProto.FLOAT, ["batch", 3, 8])],
            [numpy_helper.from_array(TABLE, "t")],
        ),
        {"max_batch_size": 4, "dynamic_batching": {"max_queue_delay_us": 200_000}},
    )
    _save(
        root / "u64",
        helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])],
            "u64",
            [vi("x", TensorProto.UINT64, [2])],
            [vi("y", TensorProto.UINT64, [2])],
        ),
    )
    (root / "garbage" / "1").mkdir(parents=True)
    (root / "garbage" / "1" / "model.onnx").write_bytes(bytes(range(256)) * 8)
    srv = InferenceServer(root, http_port=0, grpc_port=0, threads=8).start()
    try:
        yield srv
    finally:
        srv.stop(grace=5)


@pytest.fixture()
def gc(server: InferenceServer):
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    yield c
    c.close()


def _post(server: InferenceServer, path: str, doc: dict | None) -> tuple[int, dict]:
    data = b"" if doc is None else json.dumps(doc).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{server.http_port}{path}", data=data, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _still_serving(server: InferenceServer, gc) -> None:
    x = np.random.default_rng().standard_normal((3, 4)).astype(np.float32)
    want = x.astype(np.float64) @ W.astype(np.float64)
    status, doc = _post(
        server,
        "/v2/models/probe/infer",
        {"inputs": [{"name": "x", "datatype": "FP32", "shape": [3, 4], "data": x.ravel().tolist()}]},
    )
    assert status == 200, doc
    np.testing.assert_allclose(np.reshape(doc["outputs"][0]["data"], (3, 3)), want, rtol=1e-5, atol=1e-5)
    inp = grpcclient.InferInput("x", [3, 4], "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_allclose(gc.infer("probe", [inp]).as_numpy("y"), want, rtol=1e-5, atol=1e-5)


def _ids_doc(ids: np.ndarray) -> dict:
    return {"inputs": [{"name": "ids", "datatype": "INT64", "shape": list(ids.shape), "data": ids.tolist()}]}


def test_an_index_out_of_range_is_a_400_and_spares_its_batch(server, gc) -> None:
    rng = np.random.default_rng(7)
    good = [rng.integers(0, 100, (1, 3)) for _ in range(3)]
    bad = np.array([[1, 100, 2]])
    docs = [_ids_doc(good[0]), _ids_doc(bad), _ids_doc(good[1]), _ids_doc(good[2])]
    # in flight together: the batcher (200 ms window) runs them as one batch, which fails
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda d: _post(server, "/v2/models/embed/infer", d), docs))
    status, doc = answers[1]
    assert status == 400 and "index 100 is out of range for axis 0 of size 100" in doc["error"], doc
    assert ".cpp:" not in doc["error"] and "cpp/" not in doc["error"]
    for (status, doc), ids in zip([answers[0], answers[2], answers[3]], good):
        assert status == 200, doc
        got = np.reshape(doc["outputs"][0]["data"], (1, 3, 8))
        np.testing.assert_allclose(got, TABLE[ids].astype(np.float64), rtol=1e-6)
    # gRPC: the same error, INVALID_ARGUMENT
    inp = grpcclient.InferInput("ids", [1, 3], "INT64")
    inp.set_data_from_numpy(np.array([[0, 2**40, 1]], np.int64))
    with pytest.raises(InferenceServerException) as err:
        gc.infer("embed", [inp])
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT" and "out of range" in err.value.message()
    _still_serving(server, gc)


def test_run_errors_are_the_clients_where_the_request_caused_them() -> None:
    from xpuruntime import _core
    from xpuruntime.serving.scheduler import run_error

    oom = run_error(
        "m", _core.OutOfMemoryError("tried to allocate 6.71 GiB [cpp/src/core/memory/pool.cpp:88]")
    )
    assert (oom.http_status, oom.grpc_code) == (400, "RESOURCE_EXHAUSTED")
    assert "send a smaller input" in str(oom) and "cpp/" not in str(oom)
    bad = run_error("m", _core.InvalidArgumentError("index 7 out of range [cpp/src/x/data_ops.cpp:190]"))
    assert (bad.http_status, bad.grpc_code) == (400, "INVALID_ARGUMENT")
    assert str(bad) == "model 'm' failed to run: InvalidArgumentError: index 7 out of range"
    fault = run_error("m", RuntimeError("a bug of ours"))
    assert (fault.http_status, fault.grpc_code) == (500, "INTERNAL")


def test_unavailable_reasons_name_no_host_path(server, gc) -> None:
    root = str(server.repository.root)
    status, index = _post(server, "/v2/repository/index", None)
    (entry,) = [m for m in index if m["name"] == "garbage"]
    assert (
        entry["state"] == "UNAVAILABLE"
        and "'garbage/1/model.onnx' is not a valid ONNX model" in entry["reason"]
    )
    assert root not in entry["reason"]
    status, doc = _post(server, "/v2/repository/models/garbage/load", None)
    assert status == 400 and "garbage/1/model.onnx" in doc["error"] and root not in doc["error"]
    with pytest.raises(InferenceServerException) as err:
        gc.load_model("garbage")
    assert root not in err.value.message() and "garbage/1/model.onnx" in err.value.message()
    _still_serving(server, gc)


@pytest.mark.parametrize(
    "params",
    [{"config": json.dumps({"max_batch_size": 1})}, {"file:1/model.onnx": "AAAA"}],
    ids=["config", "file"],
)
def test_load_parameters_are_refused_not_ignored(server, gc, params) -> None:
    key = next(iter(params))
    status, doc = _post(server, "/v2/repository/models/probe/load", {"parameters": params})
    assert status == 400 and f"model load parameter '{key}' is not supported" in doc["error"], doc
    msg = service_pb2.RepositoryModelLoadRequest(model_name="probe")
    if key == "config":
        msg.parameters[key].string_param = params[key]
    else:
        msg.parameters[key].bytes_param = b"\0" * 4
    with pytest.raises(InferenceServerException, match="is not supported"):
        if key == "config":
            gc.load_model("probe", config=params[key])
        else:
            gc.load_model("probe", files={key: b"\0" * 4})
    assert server.repository.get("probe").model.config.max_batch_size == 8  # untouched
    status, doc = _post(server, "/v2/repository/models/probe/load", None)  # a plain reload still works
    assert status == 200, doc
    _still_serving(server, gc)


def test_grpc_raw_and_typed_contents_together_are_refused(server, gc) -> None:
    import grpc

    m = service_pb2.ModelInferRequest(model_name="probe")
    t = m.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    t.contents.fp32_contents.extend([9.0, 9.0, 9.0, 9.0])
    m.raw_input_contents.append(np.zeros(4, np.float32).tobytes())
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        call = ch.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        with pytest.raises(grpc.RpcError) as err:
            call(m.SerializeToString(), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "both typed contents and raw_input_contents" in err.value.details()
    _still_serving(server, gc)


def test_uint64_json_data_is_exact_above_2_pow_63(server, gc) -> None:
    doc = {"inputs": [{"name": "x", "datatype": "UINT64", "shape": [2], "data": [2**64 - 1, 5]}]}
    status, reply = _post(server, "/v2/models/u64/infer", doc)
    assert status == 200 and reply["outputs"][0]["data"] == [2**64 - 1, 5], reply
    doc["inputs"][0]["data"] = [2**63 + 12345, 0]
    status, reply = _post(server, "/v2/models/u64/infer", doc)
    assert status == 200 and reply["outputs"][0]["data"] == [2**63 + 12345, 0], reply
    doc["inputs"][0]["data"] = [2**64, 5]
    status, reply = _post(server, "/v2/models/u64/infer", doc)
    assert status == 400 and "UINT64" in reply["error"], reply
    doc["inputs"][0]["data"] = [-1, 2**63]
    status, reply = _post(server, "/v2/models/u64/infer", doc)
    assert status == 400 and "outside 0..18446744073709551615" in reply["error"], reply
    _still_serving(server, gc)
