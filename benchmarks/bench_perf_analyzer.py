"""perf_analyzer (Triton's load generator) against ``xpuruntime serve``: its figures beside ours.

    python benchmarks/bench_perf_analyzer.py            # writes key "perf_analyzer" into
                                                         # benchmarks/results/serving_cpu.json

Serves benchmarks/bench_serving.py's ``tiny`` MLP (16-32-8, the model of that file's
latency figures) and the bundled demo model from a bare repository (configuration
auto-completed), then runs perf_analyzer over HTTP and gRPC at concurrency 1 to 4
(count windows of ``--requests`` requests, 127.0.0.1 only) and records, per protocol
and concurrency, throughput and client-side p50/p90/p99 latency with the server-side
queue and compute times perf_analyzer reads from the statistics extension.

Needs perf_analyzer (tritonclient's wheel), libb64 (Debian ``libb64-0d``) and
libcudart.so.12 (``nvidia-cuda-runtime-cu12``). Run it on a quiet machine: the
figures are only as good as the machine is idle (the load average is recorded).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIELDS = {
    "Inferences/Second": "throughput_per_s",
    "p50 latency": "p50_us",
    "p90 latency": "p90_us",
    "p99 latency": "p99_us",
    "Server Queue": "server_queue_us",
    "Server Compute Infer": "server_compute_infer_us",
    "Server Compute Input": "server_compute_input_us",
    "Server Compute Output": "server_compute_output_us",
}


def _bench_serving() -> Any:
    spec = importlib.util.spec_from_file_location("bench_serving", ROOT / "benchmarks" / "bench_serving.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _env() -> dict[str, str]:
    env = dict(os.environ)
    spec = importlib.util.find_spec("nvidia.cuda_runtime") if importlib.util.find_spec("nvidia") else None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        lib = Path(loc) / "lib"
        if (lib / "libcudart.so.12").is_file():
            env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(lib), env.get("LD_LIBRARY_PATH")]))
    return env


def _version(binary: str) -> str:
    """perf_analyzer's version line (it prints it on stdout or stderr, by version)."""
    proc = subprocess.run([binary, "--version"], capture_output=True, text=True, env=_env(), check=False)
    return (proc.stdout.strip() or proc.stderr.strip()).splitlines()[0] if proc.stdout or proc.stderr else ""


def run_perf_analyzer(
    binary: str, model: str, port: int, protocol: str, requests: int, stability: float
) -> list[dict[str, Any]]:
    """One perf_analyzer sweep (concurrency 1..4); a row per concurrency."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "pa.csv"
        cmd = [
            binary,
            "-m",
            model,
            "-u",
            f"127.0.0.1:{port}",
            "-i",
            protocol,
            "--concurrency-range",
            "1:4",
            "--measurement-mode",
            "count_windows",
            "--measurement-request-count",
            str(requests),
            "--stability-percentage",
            str(stability),
            "-f",
            str(report),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=900, check=False)
        if proc.returncode != 0:
            raise RuntimeError(
                f"perf_analyzer failed ({proc.returncode}): {proc.stdout[-1500:]}{proc.stderr[-1500:]}"
            )
        rows = []
        for r in csv.DictReader(report.open()):
            row: dict[str, Any] = {"concurrency": int(r["Concurrency"])}
            for src, dst in FIELDS.items():
                if src in r and r[src] != "":
                    row[dst] = float(r[src])
            rows.append(row)
        return sorted(rows, key=lambda r: r["concurrency"])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000, help="requests per measurement window")
    parser.add_argument(
        "--stability",
        type=float,
        default=10.0,
        help="perf_analyzer's --stability-percentage (its default 10)",
    )
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "serving_cpu.json"))
    args = parser.parse_args()
    binary = shutil.which("perf_analyzer")
    if binary is None:
        print("perf_analyzer is not installed (pip install tritonclient[all])", file=sys.stderr)
        return 2
    bench = _bench_serving()
    load_start = os.getloadavg()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        bench.make_repository(repo, load_hidden=64, load_layers=1, delay_us=500)
        from xpuruntime.models import demo_model_path

        (repo / "demo" / "1").mkdir(parents=True)
        shutil.copy(demo_model_path(), repo / "demo" / "1" / "model.onnx")
        server = bench.ServerProcess(repo)
        try:
            for model in ("tiny", "demo"):
                for protocol in ("http", "grpc"):
                    results[f"{model}_{protocol}"] = run_perf_analyzer(
                        binary,
                        model,
                        server.http_port if protocol == "http" else server.grpc_port,
                        protocol,
                        args.requests,
                        args.stability,
                    )
        finally:
            server.stop()
    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.is_file() else {}
    doc["perf_analyzer"] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        "tool": _version(binary),
        "models": {
            "tiny": "mlp 16-32-8 (bench_serving.py), max_batch_size 1",
            "demo": "bundled demo, auto-completed",
        },
        "requests_per_window": args.requests,
        "stability_percentage": args.stability,
        "load_average_at_start": list(load_start),
        "load_average_at_end": list(os.getloadavg()),
        "results": results,
    }
    out.write_text(json.dumps(doc, indent=2) + "\n")
    for key, rows in results.items():
        for r in rows:
            print(
                f"{key:12s} c={r['concurrency']} {r.get('throughput_per_s', 0):8.1f} inf/s p50 {r.get('p50_us', 0):8.0f} us"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
