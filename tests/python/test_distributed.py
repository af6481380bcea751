"""xpuruntime.distributed without a GPU (issue 21's CI bar): the helper library loads,
NCCL's version matches its header and its own export, unavailability carries its
reason, and every argument error is a typed error raised before any NCCL call.

The GPU tests (world size 1, stream order, CUDA graphs, 2+ GPUs vs torch.distributed)
are tests/gpu/test_distributed_gpu.py.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import time
from typing import ClassVar

import numpy as np
import pytest
import xpuruntime as xrt
import xpuruntime.distributed as xd
from xpuruntime.dispatch import log as dlog
from xpuruntime.distributed import _lib, _record

HEADERS = [pathlib.Path(p) for p in ("/usr/local/cuda/include/nccl.h", "/usr/include/nccl.h")]
HEADER = next((p for p in HEADERS if p.exists()), None)
needs_header = pytest.mark.skipif(HEADER is None, reason="nccl.h is not installed here")


def _helper_built() -> str:
    try:
        _lib.library()
    except xrt.BackendUnavailableError as exc:
        return str(exc)
    return ""


pytestmark = pytest.mark.skipif(bool(_helper_built()), reason=_helper_built() or "built")


def _nccl_loadable() -> bool:
    # Through the helper, so the process loads the NCCL the helper prefers (torch's):
    # a ctypes.CDLL("libnccl.so.2") first would pin the system one for torch as well.
    try:
        xd.nccl_version()
    except xrt.BackendUnavailableError:
        return False
    return True


def _loaded_nccl() -> ctypes.CDLL:
    """The libnccl.so.2 this process loaded (the soname resolves to the loaded copy)."""
    xd.nccl_version()
    return ctypes.CDLL(_lib.torch_nccl_path() or "libnccl.so.2")


needs_nccl = pytest.mark.skipif(not _nccl_loadable(), reason="libnccl.so.2 is not installed here")


# ---- versions and ABI constants -------------------------------------------------------
@needs_nccl
def test_nccl_version_matches_the_library_export() -> None:
    code = ctypes.c_int()
    assert _loaded_nccl().ncclGetVersion(ctypes.byref(code)) == 0
    major, minor, patch = xd.nccl_version()
    assert major * 10000 + minor * 100 + patch == code.value


@needs_header
def test_nccl_version_matches_the_header() -> None:
    # The header's own library (next to it in the toolkit), picked with XRT_NCCL_LIBRARY.
    text = HEADER.read_text()
    header = int(re.search(r"#define NCCL_VERSION_CODE (\d+)", text).group(1))
    lib = next(
        (p for p in (HEADER.parent.parent / d / "libnccl.so.2" for d in ("lib64", "lib")) if p.exists()), None
    )
    if lib is None:
        pytest.skip(f"no libnccl.so.2 next to {HEADER}")
    code = "import xpuruntime.distributed as xd; print(xd.nccl_version())"
    env = {**os.environ, "XRT_NCCL_LIBRARY": str(lib)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    want = tuple(
        int(re.search(rf"#define NCCL_{k} (\d+)", text).group(1)) for k in ("MAJOR", "MINOR", "PATCH")
    )
    assert out.stdout.strip() == str(want)
    assert want[0] * 10000 + want[1] * 100 + want[2] == header


@needs_nccl
def test_the_process_shares_torchs_nccl() -> None:
    """Loading NCCL first must not break `import torch` (it needs its own, newer NCCL)."""
    code = (
        "import xpuruntime.distributed as xd\nprint(xd.nccl_version())\nimport torch\n"
        "import torch.distributed as dist\nprint('torch ok', dist.is_nccl_available())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    if "No module named 'torch'" in out.stderr:
        pytest.skip("torch is not installed")
    assert out.returncode == 0, out.stderr
    assert "torch ok" in out.stdout


def _header_enum(text: str, name: str) -> int:
    return int(re.search(rf"\b{name}\s*=\s*(\d+)", text).group(1))


@needs_header
def test_dtype_and_op_codes_are_the_headers() -> None:
    text = HEADER.read_text()
    nccl_names = {
        "int8": "ncclInt8",
        "uint8": "ncclUint8",
        "int32": "ncclInt32",
        "int64": "ncclInt64",
        "float16": "ncclFloat16",
        "float32": "ncclFloat32",
        "float64": "ncclFloat64",
        "bfloat16": "ncclBfloat16",
    }
    assert set(xd.NCCL_DTYPES) == set(nccl_names)
    for ours, theirs in nccl_names.items():
        assert xd.NCCL_DTYPES[ours] == _header_enum(text, theirs), ours
    for op, theirs in {
        "sum": "ncclSum",
        "prod": "ncclProd",
        "max": "ncclMax",
        "min": "ncclMin",
        "avg": "ncclAvg",
    }.items():
        assert xd.NCCL_OPS[op] == _header_enum(text, theirs), op
    assert _lib.UNIQUE_ID_BYTES == int(re.search(r"#define NCCL_UNIQUE_ID_BYTES (\d+)", text).group(1))


# ---- availability ---------------------------------------------------------------------
@pytest.mark.skipif(xd.is_available(), reason="NCCL and a GPU are usable here")
def test_unavailable_reason_is_reported_and_typed() -> None:
    reason = xd.unavailable_reason()
    assert reason.startswith("NCCL unavailable: ")
    assert any(
        k in reason for k in ("libcuda.so.1", "libnccl.so.2", "no usable CUDA device", "no CUDA device")
    )
    uid = xd.UniqueId(bytes(128))
    with pytest.raises(xrt.BackendUnavailableError, match="Communicator.init: NCCL unavailable"):
        xd.Communicator.init(0, 1, uid, timeout=5)
    with pytest.raises(xrt.BackendUnavailableError, match="NCCL unavailable"), xd.group():
        pass


def test_missing_helper_library_is_a_typed_status(tmp_path: pathlib.Path) -> None:
    code = (
        "import sys, xpuruntime.distributed as xd, xpuruntime as x\n"
        "assert 'torch' not in sys.modules, 'importing distributed must not import torch'\n"
        "try:\n    xd.nccl_version()\nexcept x.BackendUnavailableError as e:\n    print('ERR', e)\n"
        "print('AVAILABLE', xd.is_available())\nprint('REASON', xd.unavailable_reason())\n"
    )
    env = {**os.environ, "XRT_PLUGIN_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert f"ERR xpuruntime.distributed: the NCCL helper library is missing ({tmp_path}" in out.stdout
    assert "AVAILABLE False" in out.stdout
    assert "REASON xpuruntime.distributed: the NCCL helper library is missing" in out.stdout


def test_helper_exports_only_its_c_abi() -> None:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    out = subprocess.run(
        [nm, "-D", "--defined-only", _lib.library_path()], capture_output=True, text=True, check=True
    )
    symbols = sorted(line.split()[-1] for line in out.stdout.splitlines() if " T " in line or " D " in line)
    assert symbols and all(s.startswith("xrt_nccl_") for s in symbols), symbols
    assert set(_lib._SIGNATURES) <= set(symbols), set(_lib._SIGNATURES) - set(symbols)


# ---- UniqueId -------------------------------------------------------------------------
@needs_nccl
def test_unique_id_generate_and_round_trips(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = xd.UniqueId.generate(), xd.UniqueId.generate()
    assert len(bytes(a)) == 128 and a != b and any(bytes(a))
    assert xd.UniqueId.from_hex(a.hex()) == a
    monkeypatch.setenv("XRT_NCCL_UNIQUE_ID", a.hex())
    assert xd.UniqueId.from_env() == a
    path = tmp_path / "uid"

    def late_writer() -> None:
        time.sleep(0.2)
        a.to_file(path)

    t = threading.Thread(target=late_writer)
    t.start()
    assert xd.UniqueId.from_file(path, timeout=10) == a
    t.join()


@pytest.mark.parametrize("bad", [b"", bytes(127), bytes(129), "0" * 128, 128, None])
def test_unique_id_refuses_the_wrong_length_or_type(bad: object) -> None:
    with pytest.raises(xrt.InvalidArgumentError, match="UniqueId: expected 128 bytes"):
        xd.UniqueId(bad)  # type: ignore[arg-type]


def test_unique_id_sources_say_how_to_fix(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XRT_NCCL_UNIQUE_ID", raising=False)
    with pytest.raises(xrt.InvalidArgumentError, match=r"\$XRT_NCCL_UNIQUE_ID is not set"):
        xd.UniqueId.from_env()
    with pytest.raises(xrt.InvalidArgumentError, match="not hex digits"):
        xd.UniqueId.from_hex("zz" * 128)
    with pytest.raises(xrt.InvalidArgumentError, match="did not appear within 0.1 s"):
        xd.UniqueId.from_file(tmp_path / "never", timeout=0.1)


# ---- Communicator.init validation (before NCCL is touched) ----------------------------
@pytest.fixture
def no_nccl(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fails the test if anything reaches the helper library."""
    called: list[str] = []

    def refuse(name: str, *args: object) -> None:
        called.append(name)
        raise AssertionError(f"xrt_nccl_{name} was called: validation must come first")

    monkeypatch.setattr(_lib, "call", refuse)
    return called


UID = xd.UniqueId(bytes(range(128)))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"rank": 0, "world": 0}, "world=0; a communicator needs at least 1 rank"),
        ({"rank": -1, "world": 2}, r"rank=-1 is out of range for world=2; use 0..1"),
        ({"rank": 2, "world": 2}, r"rank=2 is out of range for world=2"),
        ({"rank": True, "world": 2}, "rank=True must be an int"),
        ({"rank": 0, "world": 2.0}, "world=2.0 must be an int"),
        ({"rank": 0, "world": 1, "unique_id": bytes(64)}, "expected 128 bytes"),
        ({"rank": 0, "world": 1, "timeout": 0}, "timeout=0 must be a positive number"),
        ({"rank": 0, "world": 1, "device": -1}, "device=-1 must be a CUDA device index"),
    ],
)
def test_init_validates_before_nccl(no_nccl: list[str], kwargs: dict, match: str) -> None:
    args = {"unique_id": UID, **kwargs}
    with pytest.raises(xrt.InvalidArgumentError, match=match):
        xd.Communicator.init(**args)
    assert no_nccl == []


# ---- collective validation on a communicator that never reaches NCCL ------------------
@pytest.fixture
def comm(monkeypatch: pytest.MonkeyPatch) -> xd.Communicator:
    c = xd.Communicator(
        0xDEAD, rank=0, world=2, device=0, timeout=5.0, deterministic=False, settings=_record.nccl_settings()
    )
    yield c
    c._handle = None  # never handed to the library


def _make(kind: str, shape: tuple[int, ...], dtype: str = "float32", transpose: bool = False) -> object:
    if kind == "torch":
        torch = pytest.importorskip("torch")
        t = torch.zeros(shape, dtype=getattr(torch, dtype))
        return t.t() if transpose else t
    arr = np.zeros(shape, dtype=np.bool_ if dtype == "bool" else dtype)
    return xrt.Tensor.from_numpy(arr.T if transpose else arr)


KINDS = ["torch", "xrt"]


@pytest.mark.parametrize("kind", KINDS)
def test_collectives_refuse_bad_tensors(comm: xd.Communicator, no_nccl: list[str], kind: str) -> None:
    with pytest.raises(xrt.InvalidArgumentError, match=r"all_reduce: tensor has dtype bool.*use one of"):
        comm.all_reduce(_make(kind, (4,), "bool"))
    with pytest.raises(
        xrt.InvalidArgumentError, match=r"broadcast: tensor \(shape \[3, 2\]\) is not contiguous"
    ):
        comm.broadcast(_make(kind, (2, 3), transpose=True), root=0)
    with pytest.raises(xrt.InvalidArgumentError, match=r"all_reduce: tensor is a cpu tensor.*move it"):
        comm.all_reduce(_make(kind, (4,)))
    with pytest.raises(xrt.InvalidArgumentError, match=r"send: tensor is a list, not a tensor"):
        comm.send([1.0, 2.0], peer=1)
    assert no_nccl == []


@pytest.mark.parametrize("kind", KINDS)
def test_collectives_check_sizes_and_dtypes(comm: xd.Communicator, no_nccl: list[str], kind: str) -> None:
    with pytest.raises(
        xrt.InvalidArgumentError, match=r"all_gather: output has 7 elements, must be world x input = 2 x 4"
    ):
        comm.all_gather(_make(kind, (7,)), _make(kind, (4,)))
    with pytest.raises(
        xrt.InvalidArgumentError,
        match=r"reduce_scatter: input has 6 elements, must be world x output = 2 x 4",
    ):
        comm.reduce_scatter(_make(kind, (4,)), _make(kind, (6,)))
    with pytest.raises(xrt.InvalidArgumentError, match=r"all_gather: input is float32 but output is float64"):
        comm.all_gather(_make(kind, (8,), "float64"), _make(kind, (4,)))
    with pytest.raises(xrt.InvalidArgumentError, match=r"all_reduce: out has 5 elements but tensor 4"):
        comm.all_reduce(_make(kind, (4,)), out=_make(kind, (5,)))
    # Right sizes: the error is now the placement (CPU here), still before NCCL.
    with pytest.raises(xrt.InvalidArgumentError, match=r"all_gather: input is a cpu tensor"):
        comm.all_gather(_make(kind, (2, 4)), _make(kind, (4,)))
    with pytest.raises(xrt.InvalidArgumentError, match=r"reduce_scatter: input is a cpu tensor"):
        comm.reduce_scatter(_make(kind, (4,)), _make(kind, (8,)))
    assert no_nccl == []


@pytest.mark.parametrize("op", ["mean", "SUMM", "", 3, None])
def test_bad_reduction_names_list_the_choices(comm: xd.Communicator, no_nccl: list[str], op: object) -> None:
    with pytest.raises(
        xrt.InvalidArgumentError,
        match=r"op=.* is not a reduction; use one of 'sum', 'prod', 'max', 'min', 'avg'",
    ):
        comm.all_reduce(_make("xrt", (4,)), op=op)  # type: ignore[arg-type]
    assert no_nccl == []


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda c, t: c.broadcast(t, root=2),
            r"broadcast: root=2 is not a rank of this communicator; use 0..1",
        ),
        (lambda c, t: c.reduce(t, root=-1), r"reduce: root=-1 is not a rank"),
        (lambda c, t: c.send(t, peer=5), r"send: peer=5 is not a rank"),
        (lambda c, t: c.recv(t, peer=True), r"recv: peer=True is not a rank"),
        (lambda c, t: c.split("a"), r"split: color='a' must be an int"),
    ],
)
def test_ranks_out_of_range(comm: xd.Communicator, no_nccl: list[str], call, match: str) -> None:
    with pytest.raises(xrt.InvalidArgumentError, match=match):
        call(comm, _make("xrt", (4,)))
    assert no_nccl == []


def test_destroyed_or_aborted_communicator_is_refused(comm: xd.Communicator, no_nccl: list[str]) -> None:
    comm._mark_aborted()
    assert comm.is_destroyed
    with pytest.raises(
        xrt.InvalidArgumentError, match=r"Communicator.split: .* is aborted; create a new one"
    ):
        comm.split(0)
    comm._handle = None
    with pytest.raises(xrt.InvalidArgumentError, match=r"Communicator.check: .* is destroyed"):
        comm.check()
    comm.destroy()  # idempotent, no library call
    assert "destroyed" in repr(comm)
    assert no_nccl == []


def test_stream_argument_is_checked() -> None:
    from xpuruntime.distributed._tensors import TensorInfo, stream_handle

    info = TensorInfo(None, 0, 4, 16, "float32", (4,), "cuda", 0, False)
    assert stream_handle(0x1234, info) == 0x1234

    class TorchLikeStream:
        cuda_stream = 0xBEEF

    assert stream_handle(TorchLikeStream(), info) == 0xBEEF
    for bad in ("s", True, 1.5):
        with pytest.raises(xrt.InvalidArgumentError, match="is not a stream"):
            stream_handle(bad, info)


# ---- deterministic policy ------------------------------------------------------------
def test_deterministic_pins_ring_or_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_record, "_settings_at_first_init", None)
    monkeypatch.setenv("NCCL_ALGO", "Tree")
    with pytest.raises(xrt.PolicyError, match="needs NCCL_ALGO=Ring but the environment sets NCCL_ALGO=Tree"):
        _record.prepare_init(True)
    monkeypatch.delenv("NCCL_ALGO")
    monkeypatch.delenv("NCCL_PROTO", raising=False)
    assert _record.prepare_init(True) == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}
    assert os.environ["NCCL_ALGO"] == "Ring" and os.environ["NCCL_PROTO"] == "Simple"
    # A process whose first communicator used NCCL's own choice cannot promise it later.
    monkeypatch.setattr(_record, "_settings_at_first_init", {"NCCL_ALGO": "", "NCCL_PROTO": ""})
    with pytest.raises(xrt.PolicyError, match="cannot be guaranteed: this process already created"):
        _record.prepare_init(True)
    assert _record.prepare_init(False)["NCCL_ALGO"] == "Ring"


def test_deterministic_policy_reaches_init(no_nccl: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(xrt.InvalidArgumentError, match="world=0"):
        xd.Communicator.init(0, 0, UID, policy=xrt.ExecutionPolicy(deterministic=True))
    with pytest.raises(xrt.InvalidArgumentError):  # not a policy in any accepted form
        xd.Communicator.init(0, 1, UID, policy=42)
    # Any accepted policy form reaches prepare_init with its deterministic flag.
    seen: list[bool] = []

    def stop(deterministic: bool) -> dict[str, str]:
        seen.append(deterministic)
        raise xrt.PolicyError("stop here")

    monkeypatch.setattr(_record, "prepare_init", stop)
    monkeypatch.setattr(xd.communicator, "unavailable_reason", lambda: "")
    monkeypatch.setattr(xd.communicator, "_default_device", lambda rank: 0)
    for policy, want in (
        (xrt.ExecutionPolicy(deterministic=True), True),
        ({"deterministic": True}, True),
        (None, False),
    ):
        with pytest.raises(xrt.PolicyError, match="stop here"):
            xd.Communicator.init(0, 1, UID, policy=policy)
        assert seen[-1] is want


# ---- what is recorded -----------------------------------------------------------------
class _FakeComm:
    rank, world, deterministic = 1, 4, True
    nccl_version_string = "2.28.9"
    nccl_settings: ClassVar[dict[str, str]] = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}


def test_each_case_is_one_decision_with_hits() -> None:
    dlog.clear()
    seq = _record.record("all_reduce", 0, "bfloat16", (8, 3), 48, 0xAB, _FakeComm())
    assert _record.record("all_reduce", 0, "bfloat16", (8, 3), 48, 0xAB, _FakeComm()) == seq
    other = _record.record("broadcast", 0, "bfloat16", (8, 3), 48, 0xAB, _FakeComm(), peer=2)
    assert other != seq
    found = {d.seq: d for d in dlog.decisions()}
    d = found[seq]
    assert d.op == "nccl.all_reduce" and d.chosen == "nccl" and d.device == "cuda:0"
    assert d.dtypes == ["bfloat16"] and d.shapes == [[8, 3]] and d.hits == 2
    assert d.rule == "policy.require"  # deterministic communicators
    for text in (
        "NCCL 2.28.9",
        "NCCL_ALGO=Ring",
        "NCCL_PROTO=Simple",
        "48 bytes",
        "stream 0xab",
        "rank 1 of 4",
        "a ring reduces in rank order",
    ):
        assert text in d.detail, text
    assert "peer/root 2" in found[other].detail


def test_profiler_event_carries_the_settings() -> None:
    from xpuruntime.distributed._tensors import TensorInfo

    info = TensorInfo(None, 0, 4, 16, "float32", (4,), "cuda", 0, False)
    prof = xrt.profiler.instance()
    with xrt.profile():
        _record.profile_event("all_gather", prof.now_ns(), info, 0x10, _FakeComm(), 0.25)
    ev = [e for e in prof.events() if e["name"] == "nccl.all_gather"][-1]
    assert ev["category"] == "nccl"
    assert ev["args"] == {
        "op": "all_gather",
        "bytes": "16",
        "dtype": "float32",
        "nccl_version": "2.28.9",
        "NCCL_ALGO": "Ring",
        "NCCL_PROTO": "Simple",
        "stream": "0x10",
        "rank": "1",
        "world": "4",
        "device_ms": "0.2500",
    }


# ---- torch process group: the unique id travels through the group ---------------------
def _pg_worker(rank: int, world: int, init_file: str, out: object) -> None:
    import torch.distributed as dist
    import xpuruntime as x
    import xpuruntime.distributed as d
    from xpuruntime.distributed.unique_id import exchange_via_torch

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        uid = exchange_via_torch()
        err = ""
        if not d.is_available():
            try:
                d.Communicator.from_torch_process_group(timeout=5)
            except x.BackendUnavailableError as exc:
                err = type(exc).__name__
        out.put((rank, bytes(uid).hex(), err))  # type: ignore[attr-defined]
    finally:
        dist.destroy_process_group()


@needs_nccl
def test_unique_id_exchange_through_a_torch_process_group(tmp_path: pathlib.Path) -> None:
    torch = pytest.importorskip("torch")
    mp = torch.multiprocessing.get_context("spawn")
    q = mp.Queue()
    world = 2
    procs = [mp.Process(target=_pg_worker, args=(r, world, str(tmp_path / "pg"), q)) for r in range(world)]
    for p in procs:
        p.start()
    results = sorted(q.get(timeout=120) for _ in range(world))
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert [r for r, _, _ in results] == [0, 1]
    assert len({h for _, h, _ in results}) == 1 and len(bytes.fromhex(results[0][1])) == 128
    if not xd.is_available():
        assert all(err == "BackendUnavailableError" for _, _, err in results)
