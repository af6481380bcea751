"""perf_analyzer (PyPI ``perf-analyzer``) against the server over HTTP and gRPC,
concurrency 1 to 4, a bounded request count, 127.0.0.1 only. Skipped where the
perf_analyzer binary is not installed (``pip install perf-analyzer``)."""

from __future__ import annotations

import csv
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("grpc")

from xpuruntime.models import demo_model_path
from xpuruntime.serving import InferenceServer

PERF_ANALYZER = shutil.which("perf_analyzer")
pytestmark = pytest.mark.skipif(
    PERF_ANALYZER is None, reason="perf_analyzer is not installed (pip install perf-analyzer)"
)


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
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = list(csv.DictReader(report.open()))
    assert [int(r["Concurrency"]) for r in rows] == [1, 2, 3, 4]
    assert all(float(r["Inferences/Second"]) > 0 for r in rows)
