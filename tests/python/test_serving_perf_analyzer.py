"""perf_analyzer against the server over HTTP and gRPC, concurrency 1 to 4, a bounded
request count, 127.0.0.1 only.

The binary comes with tritonclient's wheel (the test extra); it needs libb64 (Debian:
``libb64-0d``) and libcudart.so.12 (PyPI: ``nvidia-cuda-runtime-cu12``, found through
its package here), even against a CPU server. PyPI's ``perf-analyzer`` has no wheel
for this platform (only a placeholder). Skipped, with the missing piece named, where
the binary cannot start.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("grpc")

from xpuruntime.models import demo_model_path
from xpuruntime.serving import InferenceServer

PERF_ANALYZER = shutil.which("perf_analyzer")


def _env() -> dict[str, str]:
    """The environment with nvidia-cuda-runtime-cu12's library folder on LD_LIBRARY_PATH."""
    env = dict(os.environ)
    try:
        spec = importlib.util.find_spec("nvidia.cuda_runtime")
    except ModuleNotFoundError:
        spec = None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        lib = Path(loc) / "lib"
        if (lib / "libcudart.so.12").is_file():
            env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(lib), env.get("LD_LIBRARY_PATH")]))
    return env


def _cannot_start() -> str:
    if PERF_ANALYZER is None:
        return "perf_analyzer is not installed (it comes with tritonclient: pip install tritonclient[all])"
    probe = subprocess.run(
        [PERF_ANALYZER, "--version"], capture_output=True, text=True, env=_env(), timeout=60, check=False
    )
    if probe.returncode != 0:
        return (
            f"perf_analyzer cannot start: {probe.stderr.strip()[-200:]} (apt-get install libb64-0d; "
            "pip install nvidia-cuda-runtime-cu12)"
        )
    return ""


REASON = _cannot_start()
pytestmark = pytest.mark.skipif(bool(REASON), reason=REASON)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("pa_repo")
    (root / "demo" / "1").mkdir(parents=True)
    shutil.copy(demo_model_path(), root / "demo" / "1" / "model.onnx")
    srv = InferenceServer(root, http_port=0, grpc_port=0, threads=8).start()
    try:
        yield srv
    finally:
        srv.stop(grace=5)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_concurrency_1_to_4(server: InferenceServer, protocol: str, tmp_path: Path) -> None:
    port = server.http_port if protocol == "http" else server.grpc_port
    report = tmp_path / "pa.csv"
    proc = subprocess.run(
        [
            str(PERF_ANALYZER),
            "-m",
            "demo",
            "-u",
            f"127.0.0.1:{port}",
            "-i",
            protocol,
            "--concurrency-range",
            "1:4",
            "--measurement-mode",
            "count_windows",
            "--measurement-request-count",
            "40",
            "--max-trials",
            "3",
            "--stability-percentage",
            "999",
            "-f",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=_env(),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = list(csv.DictReader(report.open()))
    assert sorted(int(r["Concurrency"]) for r in rows) == [1, 2, 3, 4]
    assert all(float(r["Inferences/Second"]) > 0 for r in rows)
