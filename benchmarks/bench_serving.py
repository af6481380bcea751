"""xpuruntime serve: added latency over InferenceSession.run, and the batching load test.

    PYTHONPATH=python XRT_BUILD_DIR=build/d python3 benchmarks/bench_serving.py \\
        --out benchmarks/results/serving_cpu.json

Latency: ``xpuruntime serve`` runs in its own process on loopback (batching off); a
lean client (http.client keep-alive with the binary tensor extension; a raw gRPC
unary call with a pre-serialized request) sends one batch-1 request at a time. The
server's added latency is the client's round trip minus ``InferenceSession.run`` of
the same model on the same input in this process (p50 and p99 each). tritonclient's
round trip is reported too (its own client overhead included). The series (direct run,
REST, gRPC, the echo floor below, tritonclient) alternate for ``--latency-rounds``
rounds, so that on this shared machine each sees the same mix of busy moments.

Load test: gRPC requests at concurrency 16 from an asyncio client, time-capped,
against the same model served with dynamic batching and without, the two modes
alternating for a few rounds (2 x 2000 requests each by default); every request must
succeed; each mode's throughput and p50/p99 are its best round's (this machine is
shared: other processes take the cores at random moments), every round is kept.

Anchor: no Triton server runs here. The nvidia-pytriton wheel's bundled Triton 2.51
starts, but its Python-backend stub cannot import numpy from this interpreter (model
load fails with ModuleNotFoundError) and the wheel pins numpy<2, which the rest of
this environment cannot take. The anchor is instead the web stacks' own floor: an
empty echo server on the same stacks (uvicorn+Starlette, grpcio), in its own
process, answering the same bytes through the same clients; ``added_over_direct``
also gives each protocol's p50 above that floor (the request path of ours alone).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import http.client
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
GOAL_REST_US = 300.0
GOAL_GRPC_US = 150.0
GOAL_BATCH_RATIO = 2.0


# ---------------------------------------------------------------------- models
def mlp(d_in: int, hidden: int, layers: int, d_out: int, seed: int = 0) -> onnx.ModelProto:
    """A ReLU MLP with a dynamic batch dimension."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev, width = [], [], "x", d_in
    for k in range(layers):
        out_w = d_out if k == layers - 1 else hidden
        w = (rng.standard_normal((width, out_w)) / np.sqrt(width)).astype(np.float32)
        b = rng.standard_normal(out_w).astype(np.float32) * 0.1
        inits += [numpy_helper.from_array(w, f"w{k}"), numpy_helper.from_array(b, f"b{k}")]
        nodes.append(helper.make_node("MatMul", [prev, f"w{k}"], [f"m{k}"]))
        last = "y" if k == layers - 1 else f"a{k}"
        nodes.append(helper.make_node("Add", [f"m{k}", f"b{k}"], [last if k == layers - 1 else f"h{k}"]))
        if k < layers - 1:
            nodes.append(helper.make_node("Relu", [f"h{k}"], [last]))
        prev, width = last, out_w
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", d_in])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", d_out])],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def write(folder: Path, model: onnx.ModelProto, config: dict[str, Any]) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    onnx.save(model, str(folder / "model.onnx"))
    return folder / "model.onnx"


def make_repository(
    root: Path, load_hidden: int, load_layers: int, delay_us: int, instances: int = 2
) -> dict[str, Path]:
    files = {"tiny": write(root / "tiny", mlp(16, 32, 2, 8), {"max_batch_size": 1})}
    big = mlp(256, load_hidden, load_layers, 16, seed=1)
    files["load_direct"] = write(root / "load_direct", big, {"max_batch_size": 16})
    files["load_batched"] = write(
        root / "load_batched",
        big,
        {
            "max_batch_size": 16,
            "dynamic_batching": {
                "preferred_batch_sizes": [1, 2, 4, 8, 16],
                "max_queue_delay_us": delay_us,
                "max_queue_size": 4096,
            },
            "instances": instances,
        },
    )
    return files


# ---------------------------------------------------------------------- server process
class ServerProcess:
    """``xpuruntime serve`` in a child process on free ports."""

    def __init__(self, repo: Path, threads: int = 16) -> None:
        env = dict(os.environ)
        # The child imports the package this process imports (installed, or the source tree).
        import xpuruntime

        env["PYTHONPATH"] = (
            str(Path(xpuruntime.__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
        )
        self.proc = subprocess.Popen(
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
                "--threads",
                str(threads),
            ],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stderr is not None
        log = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            log.append(line)
            m = re.search(r"REST on [^:]+:(\d+), gRPC on [^:]+:(\d+)", line)
            if m:
                self.http_port, self.grpc_port = int(m.group(1)), int(m.group(2))
                return
        self.proc.kill()
        raise RuntimeError("xpuruntime serve did not start:\n" + "".join(log))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_ECHO = r"""
import asyncio, socket, sys, threading
import grpc, uvicorn
from concurrent import futures
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

async def echo(request):
    return Response(await request.body(), media_type="application/octet-stream")

sock = socket.socket()
sock.bind(("127.0.0.1", 0))
server = uvicorn.Server(uvicorn.Config(Starlette(routes=[Route("/echo", echo, methods=["POST"])]),
                                       log_level="warning", access_log=False, lifespan="off"))
def run():
    try:
        import uvloop
        loop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    loop.run_until_complete(server.serve(sockets=[sock]))
threading.Thread(target=run, daemon=True).start()
g = grpc.server(futures.ThreadPoolExecutor(16))
g.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
    "echo.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(lambda r, c: r)}),))
port = g.add_insecure_port("127.0.0.1:0")
g.start()
while not server.started:
    import time; time.sleep(0.01)
print(f"ECHO {sock.getsockname()[1]} {port}", flush=True)
sys.stdin.read()
"""


class EchoProcess:
    """The empty echo server (``_ECHO``) in its own process: the web stacks' floor."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        _, hp, gp = self.proc.stdout.readline().split()
        self.http_port, self.grpc_port = int(hp), int(gp)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


# ---------------------------------------------------------------------- clients
def rest_body(x: np.ndarray) -> tuple[bytes, dict[str, str]]:
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "datatype": "FP32",
                    "shape": list(x.shape),
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ],
            "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return head + x.tobytes(), {
        "Inference-Header-Content-Length": str(len(head)),
        "Content-Type": "application/octet-stream",
    }


def grpc_request(model: str, x: np.ndarray) -> bytes:
    from xpuruntime.serving.grpc_service import messages

    msg = messages()["ModelInferRequest"](model_name=model)
    t = msg.inputs.add()
    t.name, t.datatype = "x", "FP32"
    t.shape.extend(x.shape)
    msg.raw_input_contents.append(x.tobytes())
    return msg.SerializeToString()


def time_rest(
    port: int, model: str, x: np.ndarray, n: int, warmup: int, path: str | None = None
) -> list[float]:
    body, headers = rest_body(x)
    conn = http.client.HTTPConnection("127.0.0.1", port)
    url = path or f"/v2/models/{model}/infer"
    out = []
    for k in range(n + warmup):
        t0 = time.perf_counter()
        conn.request("POST", url, body=body, headers=headers)
        r = conn.getresponse()
        r.read()
        dt = time.perf_counter() - t0
        if r.status != 200:
            raise RuntimeError(f"REST request failed: {r.status}")
        if k >= warmup:
            out.append(dt)
    conn.close()
    return out


def time_grpc(
    port: int, model: str, x: np.ndarray, n: int, warmup: int, method: str | None = None
) -> list[float]:
    import grpc

    payload = grpc_request(model, x)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = ch.unary_unary(method or "/inference.GRPCInferenceService/ModelInfer")
        out = []
        for k in range(n + warmup):
            t0 = time.perf_counter()
            call(payload, timeout=30)
            dt = time.perf_counter() - t0
            if k >= warmup:
                out.append(dt)
    return out


def time_tritonclient(
    http_port: int, grpc_port: int, model: str, x: np.ndarray, n: int, warmup: int
) -> dict[str, list[float]]:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    out: dict[str, list[float]] = {}
    for proto, mod, port in (("rest", httpclient, http_port), ("grpc", grpcclient, grpc_port)):
        c = mod.InferenceServerClient(f"127.0.0.1:{port}")
        inp = mod.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        times = []
        for k in range(n + warmup):
            t0 = time.perf_counter()
            c.infer(model, [inp])
            dt = time.perf_counter() - t0
            if k >= warmup:
                times.append(dt)
        c.close()
        out[proto] = times
    return out


def time_direct(path: Path, x: np.ndarray, n: int, warmup: int) -> list[float]:
    import xpuruntime as xrt

    sess = xrt.InferenceSession(str(path), device="cpu")
    out = []
    for k in range(n + warmup):
        t0 = time.perf_counter()
        sess.run({"x": x})
        dt = time.perf_counter() - t0
        if k >= warmup:
            out.append(dt)
    return out


async def _load(
    port: int, model: str, requests: int, concurrency: int, cap_s: float, seed: int
) -> dict[str, Any]:
    import grpc

    rng = np.random.default_rng(seed)
    payloads = [grpc_request(model, rng.standard_normal((1, 256)).astype(np.float32)) for _ in range(64)]
    latencies: list[float] = []
    failures: list[str] = []
    sent = 0
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = ch.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        t_start = time.perf_counter()
        deadline = t_start + cap_s

        async def worker() -> None:
            nonlocal sent
            while sent < requests and time.perf_counter() < deadline:
                payload = payloads[sent % len(payloads)]
                sent += 1
                t0 = time.perf_counter()
                try:
                    await call(payload, timeout=60)
                    latencies.append(time.perf_counter() - t0)
                except grpc.aio.AioRpcError as exc:
                    failures.append(f"{exc.code().name}: {exc.details()}")

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t_start
    return {
        "requests_sent": sent,
        "completed": len(latencies),
        "failed": len(failures),
        "failures": failures[:5],
        "time_capped": sent < requests,
        "elapsed_s": elapsed,
        "throughput_rps": len(latencies) / elapsed,
        "p50_ms": pct(latencies, 50) * 1e3 if latencies else None,
        "p99_ms": pct(latencies, 99) * 1e3 if latencies else None,
    }


def load_test(port: int, requests: int, concurrency: int, cap_s: float, rounds: int = 2) -> dict[str, Any]:
    """Batching off and on, alternating for ``rounds`` rounds of ``requests`` each.

    On a shared machine other processes take the cores at random moments; each mode's
    figures are those of its best round (the least disturbed), every round is kept,
    and no request of any round may fail or be lost.
    """
    modes = (("batching_off", "load_direct"), ("batching_on", "load_batched"))
    for _, model in modes:
        asyncio.run(_load(port, model, 200, concurrency, 30, 1))  # warm-up
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m, _ in modes}
    for _ in range(rounds):
        for mode, model in modes:
            runs[mode].append(asyncio.run(_load(port, model, requests, concurrency, cap_s, 0)))
    res: dict[str, Any] = {}
    for mode, _ in modes:
        best = dict(max(runs[mode], key=lambda r: r["throughput_rps"]))
        best["requests_sent"] = sum(r["requests_sent"] for r in runs[mode])
        best["completed"] = sum(r["completed"] for r in runs[mode])
        best["failed"] = sum(r["failed"] for r in runs[mode])
        best["failures"] = [f for r in runs[mode] for f in r["failures"]][:5]
        best["rounds"] = runs[mode]
        res[mode] = best
    res["throughput_ratio"] = res["batching_on"]["throughput_rps"] / res["batching_off"]["throughput_rps"]
    return res


def summary(times: list[float]) -> dict[str, float]:
    return {
        "p50_us": pct(times, 50) * 1e6,
        "p99_us": pct(times, 99) * 1e6,
        "mean_us": float(np.mean(times)) * 1e6,
    }


def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ("numpy", "grpcio", "uvicorn", "starlette", "tritonclient", "onnx"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    import xpuruntime

    out["xpuruntime"] = xpuruntime.__version__
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--latency-rounds", type=int, default=5, help="latency series alternate this often")
    ap.add_argument("--load-requests", type=int, default=2000, help="requests per mode and round")
    ap.add_argument("--load-rounds", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--load-cap-s", type=float, default=60.0)
    ap.add_argument("--load-hidden", type=int, default=2048)
    ap.add_argument("--load-layers", type=int, default=4)
    ap.add_argument("--delay-us", type=int, default=10_000)
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--out", default=None, help="write the results JSON here")
    args = ap.parse_args()

    result: dict[str, Any] = {
        "benchmark": "serving",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} logical cores)",
        "machine": platform.platform(),
        "versions": versions(),
        "config": vars(args),
        # This machine is shared: the load average says how contended the 2 cores were.
        "load_average_at_start": list(os.getloadavg()),
        "goals": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        files = make_repository(Path(tmp), args.load_hidden, args.load_layers, args.delay_us)
        server = ServerProcess(Path(tmp))
        try:
            if not args.skip_latency:
                x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
                # The machine is shared: every series is measured in turn, round after
                # round, so that each sees the same mix of quiet and busy moments.
                direct, rest, grpc_t, tc_rest, tc_grpc = [], [], [], [], []
                floor: dict[str, list[float]] = {"rest": [], "grpc": []}
                per = max(1, args.iterations // args.latency_rounds)
                warm = args.warmup
                echo = EchoProcess()
                try:
                    for _ in range(args.latency_rounds):
                        direct += time_direct(files["tiny"], x, per, warm)
                        rest += time_rest(server.http_port, "tiny", x, per, warm)
                        grpc_t += time_grpc(server.grpc_port, "tiny", x, per, warm)
                        floor["rest"] += time_rest(echo.http_port, "", x, per, warm, path="/echo")
                        floor["grpc"] += time_grpc(
                            echo.grpc_port, "tiny", x, per, warm, method="/echo.Echo/Echo"
                        )
                        tc = time_tritonclient(server.http_port, server.grpc_port, "tiny", x, per // 2, 20)
                        tc_rest += tc["rest"]
                        tc_grpc += tc["grpc"]
                        warm = 20  # connections are new each round; the server is warm
                finally:
                    echo.stop()
                d, r, g = summary(direct), summary(rest), summary(grpc_t)
                added = {
                    "rest": {"p50_us": r["p50_us"] - d["p50_us"], "p99_us": r["p99_us"] - d["p99_us"]},
                    "grpc": {"p50_us": g["p50_us"] - d["p50_us"], "p99_us": g["p99_us"] - d["p99_us"]},
                }
                er, eg = summary(floor["rest"]), summary(floor["grpc"])
                # What the server adds above its web stack's own floor (the empty echo
                # server's round trip, same client, same bytes): our request path alone.
                added["rest_over_echo_floor"] = {"p50_us": r["p50_us"] - er["p50_us"]}
                added["grpc_over_echo_floor"] = {"p50_us": g["p50_us"] - eg["p50_us"]}
                result["latency"] = {
                    "model": "mlp 16-32-8, batch 1, batching off",
                    "direct_run": d,
                    "rest_round_trip": r,
                    "grpc_round_trip": g,
                    "tritonclient_rest_round_trip": summary(tc_rest),
                    "tritonclient_grpc_round_trip": summary(tc_grpc),
                    "anchor_empty_echo_rest_round_trip": er,
                    "anchor_empty_echo_grpc_round_trip": eg,
                    "added_over_direct": added,
                }
                result["goals"] += [
                    {
                        "name": "added latency p50 REST (us)",
                        "figure": round(added["rest"]["p50_us"], 1),
                        "target": f"<= {GOAL_REST_US:g}",
                        "met": added["rest"]["p50_us"] <= GOAL_REST_US,
                    },
                    {
                        "name": "added latency p50 gRPC (us)",
                        "figure": round(added["grpc"]["p50_us"], 1),
                        "target": f"<= {GOAL_GRPC_US:g}",
                        "met": added["grpc"]["p50_us"] <= GOAL_GRPC_US,
                    },
                ]
                print(json.dumps(result["latency"], indent=2), flush=True)
            if not args.skip_load:
                load = load_test(
                    server.grpc_port, args.load_requests, args.concurrency, args.load_cap_s, args.load_rounds
                )
                load["model"] = f"mlp 256-{args.load_hidden}x{args.load_layers - 1}-16, batch 1 per request"
                result["load"] = load
                lost = sum(
                    load[m]["requests_sent"] - load[m]["completed"] for m in ("batching_on", "batching_off")
                )
                result["goals"] += [
                    {
                        "name": "throughput batching on / off",
                        "figure": round(load["throughput_ratio"], 2),
                        "target": f">= {GOAL_BATCH_RATIO:g}",
                        "met": load["throughput_ratio"] >= GOAL_BATCH_RATIO,
                    },
                    {
                        "name": "requests lost or failed under load",
                        "figure": lost,
                        "target": "0",
                        "met": lost == 0,
                    },
                ]
                print(json.dumps(load, indent=2), flush=True)
        finally:
            server.stop()
    result["load_average_at_end"] = list(os.getloadavg())
    print(json.dumps(result["goals"], indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
