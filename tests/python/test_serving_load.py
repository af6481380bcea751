"""The bounded load test: batching on vs off at concurrency 16, every request accounted for.

Uses benchmarks/bench_serving.py's server process, models and asyncio gRPC client, with
fewer requests and a time cap so it fits CI; the committed full run is
benchmarks/results/serving_cpu.json.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("uvicorn", reason="the serving tests need the serve extra (uvicorn, starlette, grpcio)")
pytest.importorskip("grpc", reason="the serving tests need the serve extra (grpcio)")

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_serving", ROOT / "benchmarks" / "bench_serving.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_load_batching_on_vs_off(tmp_path: Path) -> None:
    bench = _bench()
    bench.make_repository(tmp_path, load_hidden=2048, load_layers=4, delay_us=10_000)
    server = bench.ServerProcess(tmp_path)
    try:
        res = bench.load_test(server.grpc_port, requests=1000, concurrency=16, cap_s=20.0, rounds=2)
    finally:
        server.stop()
    for mode in ("batching_on", "batching_off"):
        r = res[mode]
        assert r["failed"] == 0, r["failures"]
        assert r["completed"] == r["requests_sent"], f"{mode}: requests lost"
        assert r["completed"] >= 200, f"{mode}: only {r['completed']} requests in the time cap"
        assert r["p99_ms"] is not None
    print(
        f"batching off {res['batching_off']['throughput_rps']:.0f} req/s p99 {res['batching_off']['p99_ms']:.2f} ms; "
        f"on {res['batching_on']['throughput_rps']:.0f} req/s p99 {res['batching_on']['p99_ms']:.2f} ms; "
        f"ratio {res['throughput_ratio']:.2f}"
    )
    assert res["throughput_ratio"] >= 2.0, res
