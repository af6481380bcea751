"""xpuruntime serve on a CUDA device: the model config's ``device: cuda``, driven by tritonclient.

Skips with the reason unless a CUDA device and an engine that runs on it are present.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip(
    "tritonclient.http", reason="the serving tests need tritonclient[http,grpc] (serve extra)"
)
pytest.importorskip("uvicorn", reason="the serving tests need the serve extra (uvicorn, starlette, grpcio)")

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import xpuruntime as xrt
from serving_testlib import mlp_model, write_model
from xpuruntime.serving import InferenceServer

pytestmark = pytest.mark.gpu

CONFIG = {
    "device": "cuda",
    "max_batch_size": 8,
    "dynamic_batching": {"preferred_batch_sizes": [1, 2, 4, 8], "max_queue_delay_us": 2000},
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    if xrt.get_device_count() == 0:
        pytest.skip("no CUDA device here (xpuruntime.get_device_count() == 0)")
    root = tmp_path_factory.mktemp("gpu_models")
    path = write_model(root / "mlp", mlp_model(21), CONFIG)
    try:
        ref = xrt.InferenceSession(str(path), device="cuda")
        ref.run({"x": np.zeros((1, 16), np.float32)})
    except xrt.XpuRuntimeError as exc:
        pytest.skip(f"no engine serves this model on CUDA here: {type(exc).__name__}: {exc}")
    server = InferenceServer(root, http_port=0, grpc_port=0).start()
    try:
        yield server, ref
    finally:
        server.stop(grace=5)


def test_cuda_model_served_with_provenance(served) -> None:
    server, ref = served
    hc = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    gc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        assert hc.is_model_ready("mlp"), hc.get_model_repository_index()
        for rows in (1, 2, 4, 8):  # bucket sizes: the server runs exactly these shapes
            x = np.random.default_rng(rows).standard_normal((rows, 16)).astype(np.float32)
            want = np.asarray(ref.run({"x": x})["y"])
            inp = httpclient.InferInput("x", [rows, 16], "FP32")
            inp.set_data_from_numpy(x)
            res = hc.infer("mlp", [inp])
            np.testing.assert_array_equal(res.as_numpy("y"), want)
            params = res.get_response()["parameters"]
            assert params["device"].startswith("cuda") and params["engine"] == ref.engine
            ginp = grpcclient.InferInput("x", [rows, 16], "FP32")
            ginp.set_data_from_numpy(x)
            np.testing.assert_array_equal(gc.infer("mlp", [ginp]).as_numpy("y"), want)
    finally:
        hc.close()
        gc.close()


def test_cuda_concurrent_requests_batched(served) -> None:
    server, ref = served
    errors: list[BaseException] = []
    batched: list[int] = []

    def client(seed: int) -> None:
        c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        try:
            for k in range(8):
                x = np.random.default_rng(100 * seed + k).standard_normal((1, 16)).astype(np.float32)
                inp = grpcclient.InferInput("x", [1, 16], "FP32")
                inp.set_data_from_numpy(x)
                res = c.infer("mlp", [inp])
                # Batched with others, a GEMM of another M may round differently from M=1.
                np.testing.assert_allclose(
                    res.as_numpy("y"), np.asarray(ref.run({"x": x})["y"]), rtol=1e-5, atol=1e-6
                )
                batched.append(res.get_response().parameters["batch_requests"].int64_param)
        except Exception as exc:  # noqa: BLE001 - surfaced by the assert below
            errors.append(exc)
        finally:
            c.close()

    threads = [threading.Thread(target=client, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[0]
    assert len(batched) == 64 and max(batched) > 1


def test_cuda_metrics_report_the_device(served) -> None:
    import http.client

    server, ref = served
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    assert 'xrt_inference_batch_size_count{model="mlp"' in text
    try:
        xrt.memory.memory_stats(ref.device)
    except xrt.XpuRuntimeError as exc:
        pytest.skip(f"xpuruntime's allocator reports nothing for {ref.device} here: {exc}")
    assert f'xrt_device_memory_allocated_bytes{{device="{ref.device}"}}' in text
