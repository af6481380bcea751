"""Ray Serve: a local Ray instance, 2 replicas of the xpuruntime deployment, driven by tritonclient."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "tritonclient.http", reason="the serving tests need tritonclient[http,grpc] (serve extra)"
)
ray = pytest.importorskip("ray", reason="the Ray Serve test needs ray[serve] (serve extra)")
pytest.importorskip("ray.serve", reason="the Ray Serve test needs ray[serve] (serve extra)")

import tritonclient.http as httpclient
import xpuruntime as xrt
from serving_testlib import kernel_policy_of, mlp_model, write_model

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_app(tmp_path_factory: pytest.TempPathFactory):
    from ray import serve
    from xpuruntime.serving.ray_serve import build_app

    root = tmp_path_factory.mktemp("ray_models")
    batching = {
        "max_batch_size": 4,
        "dynamic_batching": {"preferred_batch_sizes": [1, 2, 4], "max_queue_delay_us": 1000},
    }
    batching["kernel_policy"] = "kernel_policy.json"  # batch-invariant matmul: see serving_testlib
    (root / "mlp").mkdir()
    (root / "mlp" / "kernel_policy.json").write_text(xrt.KernelPolicy(matmul="cpu_blocked").to_json())
    path = write_model(root / "mlp", mlp_model(11), batching)
    env = {k: os.environ[k] for k in ("XRT_BUILD_DIR",) if k in os.environ}
    env["PYTHONPATH"] = os.pathsep.join(
        [
            str(Path(xrt.__file__).resolve().parents[1]),
            str(ROOT / "tests" / "python"),
            os.environ.get("PYTHONPATH", ""),
        ]
    )
    try:
        ray.init(num_cpus=4, include_dashboard=False, runtime_env={"env_vars": env}, log_to_driver=False)
    except Exception as exc:  # noqa: BLE001 - any failure to start Ray here is the skip reason
        pytest.skip(f"a local Ray instance could not start here: {type(exc).__name__}: {exc}")
    try:
        # The port is free when chosen, but Ray's own processes bind ephemeral ports too
        # and can take it before the HTTP proxy does (a CI run failed with "Failed to
        # bind to address"): then another port, a few times.
        for attempt in range(3):
            port = _free_port()
            try:
                serve.start(http_options={"host": "127.0.0.1", "port": port})
                serve.run(build_app(root, num_replicas=2, num_cpus=1), name="xrt", route_prefix="/")
                break
            except Exception as exc:  # Ray wraps the bind error in its own exception types
                if "Failed to bind" not in str(exc) or attempt == 2:
                    raise
                serve.shutdown()
        yield port, path
    finally:
        serve.shutdown()
        ray.shutdown()


def test_two_replicas_serve_the_protocol(ray_app) -> None:
    port, path = ray_app
    ref = xrt.InferenceSession(str(path), device="cpu", kernel_policy=kernel_policy_of(path))
    c = httpclient.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=60)
    try:
        assert c.is_server_live() and c.is_model_ready("mlp")
        assert c.get_model_metadata("mlp")["inputs"][0]["shape"] == [-1, 16]
        rng = np.random.default_rng(0)
        instances = set()
        # Ray's router picks among the replicas at random: up to 200 requests for both to show.
        for k in range(200):
            if k >= 48 and len(instances) == 2:
                break
            x = rng.standard_normal((1 + k % 4, 16)).astype(np.float32)
            inp = httpclient.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            res = c.infer("mlp", [inp])
            want = np.asarray(ref.run({"x": x})["y"])
            assert np.array_equal(res.as_numpy("y").view(np.uint32), want.view(np.uint32))
            instances.add(res.get_response()["parameters"]["server_instance"])
        assert len(instances) == 2, f"requests reached {instances}, expected both replicas"
    finally:
        c.close()
