"""Structure-aware request fuzzer for ``xpuruntime serve`` (REST and gRPC, issue 35 §6).

The contract under test: whatever a client sends, the server answers it (a 4xx with a
message for a client's mistake), never a 500, never a hang, never a crash, and keeps
serving: after every case a correct request to the ``probe`` model is answered with
the right numbers (compared with NumPy float64).

Cases are built from the Open Inference Protocol's structure, not random bytes: infer
documents with odd names, versions, datatypes, shapes, data and parameters, the binary
tensor extension's header, gzip bodies, pipelined requests on one connection, deep
JSON, the repository routes, and gRPC messages (built, then possibly bit-flipped).
Every case is a small JSON file (``{"kind": "http", "raw": <base64 request bytes>}``
or ``{"kind": "grpc", "method": ..., "message": <base64>}``), so a finding is
replayed byte for byte.

    # explore from a seed (bounded), writing findings to fuzz/corpus/server/
    PYTHONPATH=python python3 fuzz/server_request_fuzzer.py --runs 2000 --seed 7 --save-findings
    # replay the committed corpus (what CI runs, through fuzz/replay_server_corpus.py)
    PYTHONPATH=python python3 fuzz/server_request_fuzzer.py --replay fuzz/corpus/server

The server listens on 127.0.0.1 only, on ports the OS picks. Needs the serve extra
(uvicorn, starlette, orjson, grpcio), onnx and numpy.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import json
import random
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CORPUS = Path(__file__).parent / "corpus" / "server"
TIMEOUT_S = 10.0  # a case answered later than this is a hang
MAX_BODY = 4 << 20

# ------------------------------------------------------------------------------ repository
_W = np.random.default_rng(35).standard_normal((4, 3)).astype(np.float32)


def _save(folder: Path, model: onnx.ModelProto, config: str | None = None, name: str = "config.json") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    model.ir_version = 8
    onnx.save(model, str(folder / "model.onnx"))
    if config is not None:
        (folder / name).write_text(config)


def build_repository(root: Path) -> None:
    """probe (y = x W, FP32 [n, 4]), add_int (INT32 [2, 3]), log (NaN/-inf outputs),
    bomb (a YAML alias bomb config), many (instances: 100000) and embed (a Gather over
    a 10-row table, batched: ids out of range are the request's fault)."""
    op = [helper.make_opsetid("", 17)]
    probe = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
        [numpy_helper.from_array(_W, "w")],
    )
    _save(root / "probe", helper.make_model(probe, opset_imports=op), json.dumps({"max_batch_size": 8}))
    add = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        "add_int",
        [helper.make_tensor_value_info(n, TensorProto.INT32, [2, 3]) for n in "ab"],
        [helper.make_tensor_value_info("c", TensorProto.INT32, [2, 3])],
    )
    _save(root / "add_int", helper.make_model(add, opset_imports=op))
    log = helper.make_graph(
        [helper.make_node("Log", ["x"], ["y"])],
        "log",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    _save(root / "log", helper.make_model(log, opset_imports=op))
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")
    )
    _save(root / "bomb", helper.make_model(add, opset_imports=op), bomb, "config.yaml")
    _save(root / "many", helper.make_model(add, opset_imports=op), json.dumps({"instances": 100000}))
    embed = helper.make_graph(
        [helper.make_node("Gather", ["t", "ids"], ["y"])],
        "embed",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, 4])],
        [numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "t")],
    )
    _save(
        root / "embed",
        helper.make_model(embed, opset_imports=op),
        json.dumps({"max_batch_size": 4, "dynamic_batching": {"max_queue_delay_us": 1000}}),
    )


# ------------------------------------------------------------------------------ generation
_NAMES = [
    "probe", "add_int", "log", "bomb", "many", "nope", "etc", "/etc", "%2Fetc", "%252Fetc", "..", ".",
    "../probe", "probe/../probe", ".hidden", "a" * 200, "x" * 20000, "модель", "a b", "a%00b", "",
    "probe%2F1", "%E2%80%AE", "C:", "\\etc",
]  # fmt: skip
_DATATYPES = [
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16",
    "FP32", "FP64", "BF16", "BYTES", "fp32", "", "FP8", 7, None,
]  # fmt: skip
_VALUES: list[Any] = [
    0, 1, -1, 1.7, 0.5, 1e6, 1e39, -1e308, 2**31, 2**63, 2**64, -(2**63) - 1, True, False, None, "0.5",
    "NaN", "", [], {}, [1, 2], {"a": 1},
]  # fmt: skip


def _deep(rng: random.Random, depth: int) -> str:
    if rng.random() < 0.5:
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


def _rand_value(rng: random.Random) -> Any:
    return rng.choice(_VALUES)


def _infer_doc(rng: random.Random) -> tuple[dict[str, Any], bytes]:
    """An infer document and the binary tail of the binary tensor extension."""
    tail = b""
    inputs = []
    for _ in range(rng.choice([0, 1, 1, 1, 2, 3])):
        t: dict[str, Any] = {
            "name": rng.choice(["x", "a", "b", "z", "", 7, None]),
            "datatype": rng.choice(_DATATYPES),
        }
        shape: Any = rng.choice(
            [
                [1, 4],
                [2, 4],
                [2, 3],
                [4],
                [0, 4],
                [-1, 4],
                [2**40, 2**40],
                [1.5, 4],
                "1,4",
                [],
                [True, 4],
                None,
            ]
        )
        t["shape"] = shape
        mode = rng.random()
        if mode < 0.5:
            n = rng.choice([0, 1, 3, 4, 6, 8])
            kind = rng.random()
            if kind < 0.4:
                t["data"] = [round(rng.uniform(-3, 3), 3) for _ in range(n)]
            elif kind < 0.6:
                t["data"] = [rng.randint(-5, 5) for _ in range(n)]
            elif kind < 0.8:
                t["data"] = [_rand_value(rng) for _ in range(n)]
            else:
                t["data"] = [[round(rng.uniform(-1, 1), 2) for _ in range(4)] for _ in range(max(n // 4, 1))]
        elif mode < 0.8:
            size = rng.choice([0, 4, 16, 24, 32, 48, 2**63, -1, "16", 1.5])
            t["parameters"] = {"binary_data_size": size}
            if isinstance(size, int) and 0 <= size <= 4096:
                tail += bytes(rng.getrandbits(8) for _ in range(size + rng.choice([0, 0, 0, 1, -1])))
        elif mode < 0.9:
            t["data"] = (
                json.loads("[" + _deep(rng, rng.choice([3, 60, 70])) + "]") if rng.random() < 0.5 else {}
            )
        inputs.append(t)
    doc: dict[str, Any] = {"inputs": inputs if rng.random() < 0.95 else rng.choice([{}, "x", None])}
    if rng.random() < 0.3:
        doc["id"] = rng.choice(["req-1", 7, None, ["a"], {"a": 1}, "é" * 100])
    if rng.random() < 0.3:
        doc["parameters"] = {"binary_data_output": rng.choice([True, False, "false", 1, None])}
    if rng.random() < 0.3:
        doc["outputs"] = [
            {
                "name": rng.choice(["y", "c", "q", 5]),
                "parameters": {"binary_data": rng.choice([True, False, "false", 0])},
            }
        ]
    return doc, tail


def _http(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    if method == "POST" or body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace") + body


def _path_name(rng: random.Random) -> str:
    name = rng.choice(_NAMES)
    # A URL carries the name percent-encoded (once, as a client would) or raw.
    if rng.random() < 0.5:
        from urllib.parse import quote

        return quote(name, safe="")
    return (
        "".join(c if 32 < ord(c) < 127 and c not in "?# " else "%%%02X" % (ord(c) & 0xFF) for c in name)
        or "x"
    )


def http_case(rng: random.Random) -> bytes:
    """One raw HTTP request (or several, pipelined)."""
    r = rng.random()
    name = _path_name(rng)
    version = rng.choice(
        ["", "", "/versions/1", "/versions/x", "/versions/99999999999999999999", "/versions/-1"]
    )
    if r < 0.55:
        doc, tail = _infer_doc(rng)
        head = json.dumps(doc).encode()
        if rng.random() < 0.1:
            head = head[: rng.randrange(len(head) + 1)]
        headers: dict[str, str] = {"Content-Type": "application/json"}
        if tail or rng.random() < 0.15:
            headers["Inference-Header-Content-Length"] = rng.choice(
                [str(len(head))] * 4 + ["\xb2", "12a", "-1", " 5", "99999999999999999999999", "", "0x10"]
            )
        body = head + tail
        if rng.random() < 0.1:
            body = gzip.compress(body) if rng.random() < 0.7 else b"\x1f\x8b" + body[:20]
            headers["Content-Encoding"] = "gzip"
        return _http("POST", f"/v2/models/{name}{version}/infer", body, headers)
    if r < 0.65:
        depth = rng.choice([10, 65, 5000, 100000])
        body = (
            _deep(rng, depth).encode()
            if rng.random() < 0.5
            else b'{"id": ' + _deep(rng, depth).encode() + b', "inputs": []}'
        )
        path = rng.choice(["/v2/repository/index", f"/v2/models/{name}/infer", "/v2/models/probe/infer"])
        return _http("POST", path, body)
    if r < 0.75:
        suffix = rng.choice(["", "/ready", "/explain"])
        return _http("GET", f"/v2/models/{name}{version}{suffix}")
    if r < 0.85:
        body = rng.choice(
            [b"", b"{}", b'{"ready": true}', b'{"ready": "false"}', b"[]", b"nul", b'{"ready": 1}']
        )
        if rng.random() < 0.5:
            return _http("POST", "/v2/repository/index", body)
        if name in ("probe",):
            name = "nope"
        return _http("POST", f"/v2/repository/models/{name}/{rng.choice(['load', 'unload'])}", body)
    if r < 0.92:
        # pipelined: two or three requests in one write, on one connection
        return b"".join(
            http_case(rng) if rng.random() < 0.5 else _probe_http() for _ in range(rng.choice([2, 3]))
        )
    return _http(
        rng.choice(["GET", "PUT", "DELETE", "OPTIONS"]),
        rng.choice(["/v2", "/metrics", "/v2/health/live", "/x"]),
    )


def grpc_case(rng: random.Random) -> tuple[str, bytes]:
    """A gRPC method and its serialized request (built from the protocol, maybe bit-flipped)."""
    from xpuruntime.serving.grpc_service import messages

    m = messages()
    name = rng.choice(_NAMES)
    method = rng.choice(
        ["ModelInfer"] * 5 + ["ModelMetadata", "ModelReady", "RepositoryModelLoad", "RepositoryIndex"]
    )
    if method == "ModelInfer":
        req = m["ModelInferRequest"](model_name=name, model_version=rng.choice(["", "1", "x", "9" * 30]))
        for _ in range(rng.choice([0, 1, 2])):
            t = req.inputs.add()
            t.name = rng.choice(["x", "a", "b", "q"])
            dt = rng.choice([d for d in _DATATYPES if isinstance(d, str)])
            t.datatype = dt
            t.shape.extend(rng.choice([[1, 4], [2, 3], [4], [0], [2**40, 2**40]]))
            if rng.random() < 0.5:
                n = rng.choice([0, 3, 4, 6])
                field = rng.choice(
                    ["fp32_contents", "int_contents", "int64_contents", "bool_contents", "uint_contents"]
                )
                vals = {
                    "fp32_contents": [
                        rng.uniform(-1e39, 1e39) if rng.random() < 0.1 else rng.uniform(-2, 2)
                        for _ in range(n)
                    ],
                    "int_contents": [rng.randint(-(2**31), 2**31 - 1) for _ in range(n)],
                    "int64_contents": [rng.randint(-(2**63), 2**63 - 1) for _ in range(n)],
                    "bool_contents": [rng.random() < 0.5 for _ in range(n)],
                    "uint_contents": [rng.randint(0, 2**32 - 1) for _ in range(n)],
                }[field]
                getattr(t.contents, field).extend(vals)
            else:
                req.raw_input_contents.append(
                    bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 16, 24, 32])))
                )
        if rng.random() < 0.3:
            req.outputs.add().name = rng.choice(["y", "c", "q"])
        if rng.random() < 0.2:
            req.id = rng.choice(["id", "é" * 50])
        payload = req.SerializeToString()
    elif method == "ModelMetadata":
        payload = m["ModelMetadataRequest"](name=name, version=rng.choice(["", "1", "x"])).SerializeToString()
    elif method == "ModelReady":
        payload = m["ModelReadyRequest"](name=name).SerializeToString()
    elif method == "RepositoryModelLoad":
        payload = m["RepositoryModelLoadRequest"](
            model_name="nope" if name == "probe" else name
        ).SerializeToString()
    else:
        payload = m["RepositoryIndexRequest"](ready=rng.random() < 0.5).SerializeToString()
    if payload and rng.random() < 0.2:
        b = bytearray(payload)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        payload = bytes(b)
    return method, payload


# ------------------------------------------------------------------------------ running
def _probe_http() -> bytes:
    doc = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4], "data": _PROBE_X.reshape(-1).tolist()}]
    }
    return _http(
        "POST", "/v2/models/probe/infer", json.dumps(doc).encode(), {"Content-Type": "application/json"}
    )


_PROBE_X = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
_PROBE_Y = (_PROBE_X.astype(np.float64) @ _W.astype(np.float64)).reshape(-1)


def read_responses(sock: socket.socket, deadline: float, want: int) -> list[int]:
    """Status codes of the HTTP/1.1 responses read from ``sock`` (content-length framed)."""
    buf = b""
    statuses: list[int] = []
    while len(statuses) < want:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            head = buf[:end].decode("latin-1").split("\r\n")
            fields = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in head[1:])}
            length = int(fields.get("content-length", "0"))
            if len(buf) >= end + 4 + length:
                statuses.append(int(head[0].split()[1]))
                buf = buf[end + 4 + length :]
                continue
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(1 << 16)
        except TimeoutError:
            break
        except ConnectionResetError:
            break
        if not chunk:
            break
        buf += chunk
    return statuses


def _count_requests(raw: bytes) -> int:
    return sum(raw.count(m) for m in (b"GET /", b"POST /", b"PUT /", b"DELETE /", b"OPTIONS /")) or 1


class Target:
    """A server over a fresh repository, and the oracle every case is checked with."""

    def __init__(self) -> None:
        from xpuruntime.serving import InferenceServer

        self._tmp = tempfile.TemporaryDirectory(prefix="xrt-serve-fuzz-")
        build_repository(Path(self._tmp.name))
        t0 = time.monotonic()
        self.server = InferenceServer(
            self._tmp.name, http_port=0, grpc_port=0, max_request_bytes=MAX_BODY, threads=4
        ).start()
        self.start_s = time.monotonic() - t0
        import grpc

        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.server.grpc_port}")

    def close(self) -> None:
        self.channel.close()
        self.server.stop(grace=5)
        self._tmp.cleanup()

    def http(self, raw: bytes) -> str:
        """'' when every request of ``raw`` was answered without a server fault, else why not."""
        want = _count_requests(raw)
        with socket.create_connection(("127.0.0.1", self.server.http_port), timeout=TIMEOUT_S) as s:
            s.sendall(raw)
            statuses = read_responses(s, time.monotonic() + TIMEOUT_S, want)
        if not statuses:
            return "no response"
        faults = [c for c in statuses if c >= 500 and c != 503]
        if faults:
            return f"HTTP {faults[0]}"
        return ""

    def grpc(self, method: str, payload: bytes) -> str:
        import grpc

        call = self.channel.unary_unary(f"/inference.GRPCInferenceService/{method}")
        try:
            call(payload, timeout=TIMEOUT_S)
        except grpc.RpcError as exc:
            code = exc.code()
            if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.DEADLINE_EXCEEDED):
                return f"gRPC {code.name}: {exc.details()}"
        return ""

    def alive(self) -> str:
        """'' when a correct REST request gets the right numbers, else what went wrong."""
        raw = _probe_http()
        with socket.create_connection(("127.0.0.1", self.server.http_port), timeout=TIMEOUT_S) as s:
            s.sendall(raw)
            s.settimeout(TIMEOUT_S)
            data = b""
            while b"\r\n\r\n" not in data or len(data) < data.find(b"\r\n\r\n") + 4 + _length(data):
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            return f"probe request answered {head[:40]!r}"
        y = np.asarray(json.loads(body)["outputs"][0]["data"], np.float64)
        if not np.allclose(y, _PROBE_Y, rtol=1e-5, atol=1e-5):
            return "probe request answered wrong numbers"
        return ""

    def run(self, case: dict[str, Any]) -> str:
        if case["kind"] == "http":
            why = self.http(base64.b64decode(case["raw"]))
        else:
            why = self.grpc(case["method"], base64.b64decode(case["message"]))
        return why or self.alive()


def _length(data: bytes) -> int:
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
    for line in head.split("\r\n"):
        if line.startswith("content-length:"):
            return int(line.split(":", 1)[1])
    return 0


def generate(rng: random.Random) -> dict[str, Any]:
    """One case (HTTP three times in four)."""
    if rng.random() < 0.75:
        return {"kind": "http", "raw": base64.b64encode(http_case(rng)).decode()}
    method, payload = grpc_case(rng)
    return {"kind": "grpc", "method": method, "message": base64.b64encode(payload).decode()}


def regression_cases() -> dict[str, dict[str, Any]]:
    """The outside probe's findings of issue 35, one case each (written by --write-regressions)."""

    def http(raw: bytes) -> dict[str, Any]:
        return {"kind": "http", "raw": base64.b64encode(raw).decode()}

    def gz(path: str, body: bytes, extra: dict[str, str] | None = None) -> dict[str, Any]:
        headers = {"Content-Encoding": "gzip", **(extra or {})}
        return http(_http("POST", path, gzip.compress(body, 9), headers))

    def grpc(method: str, msg: Any) -> dict[str, Any]:
        return {
            "kind": "grpc",
            "method": method,
            "message": base64.b64encode(msg.SerializeToString()).decode(),
        }

    from xpuruntime.serving.grpc_service import messages

    m = messages()
    deep_objects = b'{"id": ' + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b', "inputs": []}'
    one = '{"inputs": [{"name": "x", "datatype": "%s", "shape": [1, 4], "data": %s}]%s}'
    return {
        "nested-arrays-1e6": gz("/v2/models/probe/infer", b"[" * 1_000_000 + b"]" * 1_000_000),
        "nested-id-objects-1e5": gz("/v2/models/probe/infer", deep_objects),
        "nested-id-5000": gz("/v2/models/probe/infer", b'{"id": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
        "nested-index-1e6": gz("/v2/repository/index", b"[" * 1_000_000 + b"]" * 1_000_000),
        "yaml-bomb-load": http(_http("POST", "/v2/repository/models/bomb/load")),
        "instances-1e5-load": http(_http("POST", "/v2/repository/models/many/load")),
        "encoded-path-etc": http(_http("POST", "/v2/models/%252Fetc/infer", b"{}")),
        "encoded-path-dotdot": http(_http("POST", "/v2/repository/models/..%252F..%252Fetc/load")),
        "grpc-metadata-etc": grpc("ModelMetadata", m["ModelMetadataRequest"](name="/etc")),
        "grpc-load-dotdot": grpc(
            "RepositoryModelLoad", m["RepositoryModelLoadRequest"](model_name="../../etc")
        ),
        "grpc-infer-etc": grpc("ModelInfer", m["ModelInferRequest"](model_name="/etc")),
        "int64-fraction": http(
            _http(
                "POST",
                "/v2/models/add_int/infer",
                b'{"inputs": [{"name": "a", "datatype": "INT64", "shape": [1], "data": [1.7]}]}',
            )
        ),
        "fp16-1e6": http(
            _http("POST", "/v2/models/probe/infer", (one % ("FP16", "[1e6, 0, 0, 0]", "")).encode())
        ),
        "fp32-strings": http(
            _http(
                "POST",
                "/v2/models/probe/infer",
                (one % ("FP32", '["0.5", "0.5", "0.5", "0.5"]', "")).encode(),
            )
        ),
        "binary-data-string": http(
            _http(
                "POST",
                "/v2/models/probe/infer",
                (
                    one
                    % (
                        "FP32",
                        "[1, 2, 3, 4]",
                        ', "outputs": [{"name": "y", "parameters": {"binary_data": "false"}}]',
                    )
                ).encode(),
            )
        ),
        "nan-output-json": http(
            _http(
                "POST",
                "/v2/models/log/infer",
                b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [4], "data": [-1, 0, 1, 2]}]}',
            )
        ),
        "name-20000": http(_http("POST", "/v2/models/" + "m" * 20000 + "/infer", b"{}")),
        "header-length-superscript": http(
            _http("POST", "/v2/models/probe/infer", b"{}", {"Inference-Header-Content-Length": "\xb2"})
        ),
        # the second outside probe (2026-11-29): a Gather index out of range was a 500
        "gather-index-out-of-range": http(
            _http(
                "POST",
                "/v2/models/embed/infer",
                b'{"inputs": [{"name": "ids", "datatype": "INT64", "shape": [1, 3], "data": [0, 10, 1]}]}',
            )
        ),
        "gather-index-2pow40-pipelined": http(
            _http(
                "POST",
                "/v2/models/embed/infer",
                b'{"inputs": [{"name": "ids", "datatype": "INT64", "shape": [2, 3], '
                b'"data": [0, 1099511627776, 1, -11, 2, 3]}]}',
            )
            + _probe_http()
        ),
        "grpc-gather-index-out-of-range": grpc(
            "ModelInfer",
            _ids_message(m, np.array([[0, 2**62, 1]], np.int64)),
        ),
        "pipelined-two": http(_probe_http() + _probe_http()),
        "pipelined-unknown-then-probe": http(
            _http("POST", "/v2/models/nope/infer", b"x" * 70_000) + _probe_http()
        ),
    }


def _ids_message(m: dict[str, Any], ids: np.ndarray) -> Any:
    msg = m["ModelInferRequest"](model_name="embed")
    t = msg.inputs.add()
    t.name, t.datatype = "ids", "INT64"
    t.shape.extend(ids.shape)
    msg.raw_input_contents.append(ids.tobytes())
    return msg


def save(case: dict[str, Any], folder: Path, prefix: str) -> Path:
    text = json.dumps(case, sort_keys=True)
    path = folder / f"{prefix}-{hashlib.sha1(text.encode()).hexdigest()[:12]}.json"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replay", type=Path, help="replay every case of this corpus folder")
    ap.add_argument("--runs", type=int, default=0, help="cases to generate (after any replay)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-seconds", type=float, default=300.0, help="stop generating after this long")
    ap.add_argument("--save-findings", action="store_true", help="write failing cases to fuzz/corpus/server")
    ap.add_argument("--write-seeds", type=int, default=0, help="write N generated cases as corpus seeds")
    ap.add_argument("--write-regressions", action="store_true", help="write the issue-35 cases to the corpus")
    args = ap.parse_args(argv)
    if args.write_regressions:
        for name, case in regression_cases().items():
            CORPUS.mkdir(parents=True, exist_ok=True)
            (CORPUS / f"issue35-{name}.json").write_text(json.dumps(case, sort_keys=True) + "\n")

    target = Target()
    failures = 0
    try:
        print(
            f"server up in {target.start_s:.2f} s (REST {target.server.http_port}, gRPC {target.server.grpc_port})"
        )
        if args.replay is not None:
            files = sorted(args.replay.glob("*.json"))
            for f in files:
                why = target.run(json.loads(f.read_text()))
                if why:
                    failures += 1
                    print(f"FAIL {f.name}: {why}", flush=True)
            print(f"replayed {len(files)} cases, {failures} failures")
        rng = random.Random(args.seed)
        t0 = time.monotonic()
        done = 0
        for k in range(max(args.runs, args.write_seeds)):
            if time.monotonic() - t0 > args.max_seconds:
                break
            case = generate(rng)
            if k < args.write_seeds:
                save(case, CORPUS, "seed")
            why = target.run(case)
            done += 1
            if why:
                failures += 1
                where = save(case, CORPUS, "finding") if args.save_findings else None
                print(f"FAIL case {k}: {why}" + (f" (saved {where})" if where else ""), flush=True)
        if done:
            print(
                f"generated {done} cases from seed {args.seed} in {time.monotonic() - t0:.1f} s, {failures} failures"
            )
    finally:
        target.close()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
