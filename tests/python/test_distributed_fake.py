"""The NCCL helper's C++ state machine without a GPU, against test doubles of NCCL and
the CUDA driver (compiled here from the real nccl.h / cuda.h, loaded through
XRT_NCCL_LIBRARY / XRT_CUDA_DRIVER_LIBRARY).

The doubles are NOT NCCL: host memory stands in for device memory and a world of one
rank "reduces" by copying. What this checks is ours: the Python -> ctypes -> C ABI
marshalling (pointers, counts, dtype and op codes, peers), nonblocking init and
collectives polled to completion, Work handles, split, group pairing, and the paths
that must not hang — an init that never completes, a collective that never finishes,
an asynchronous NCCL error — each ending in ncclCommAbort and a typed error within
the timeout, with contexts and events released. Each scenario runs in its own
process (the libraries load once per process).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

INCLUDE = pathlib.Path("/usr/local/cuda/include")
CXX = shutil.which("g++") or shutil.which("c++")

FAKE_CUDA = r"""
#include <cuda.h>
#include <cstdlib>
static bool flag(const char* k) { const char* e = std::getenv(k); return e && *e == '1'; }
extern "C" { int fake_cuda_ctx_refs = 0; int fake_cuda_live_events = 0; }
CUresult CUDAAPI cuInit(unsigned int) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuGetErrorString(CUresult, const char** s) { *s = "fake cuda error"; return CUDA_SUCCESS; }
CUresult CUDAAPI cuDeviceGetCount(int* n) {
  const char* e = std::getenv("FAKE_CUDA_DEVICES"); *n = e ? std::atoi(e) : 1; return CUDA_SUCCESS; }
CUresult CUDAAPI cuDeviceGet(CUdevice* d, int ordinal) { *d = ordinal; return CUDA_SUCCESS; }
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) {
  ++fake_cuda_ctx_refs; *c = reinterpret_cast<CUcontext>(0x1000 + d); return CUDA_SUCCESS; }
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice) { --fake_cuda_ctx_refs; return CUDA_SUCCESS; }
CUresult CUDAAPI cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuEventCreate(CUevent* e, unsigned int) {
  ++fake_cuda_live_events; *e = reinterpret_cast<CUevent>(new int(0)); return CUDA_SUCCESS; }
CUresult CUDAAPI cuEventRecord(CUevent, CUstream) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuEventQuery(CUevent) { return flag("FAKE_CUDA_HANG") ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS; }
CUresult CUDAAPI cuEventDestroy(CUevent e) {
  --fake_cuda_live_events; delete reinterpret_cast<int*>(e); return CUDA_SUCCESS; }
CUresult CUDAAPI cuEventElapsedTime(float* ms, CUevent, CUevent) { *ms = 1.5f; return CUDA_SUCCESS; }
CUresult CUDAAPI cuStreamWaitEvent(CUstream, CUevent, unsigned int) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuStreamIsCapturing(CUstream, CUstreamCaptureStatus* s) {
  *s = flag("FAKE_CUDA_CAPTURING") ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS; }
"""

FAKE_NCCL = r"""
#include <nccl.h>
#include <cstdlib>
#include <cstring>
struct ncclComm { int rank, nranks, polls; ncclResult_t state; int calls; };
static int env_int(const char* k, int d) { const char* e = std::getenv(k); return e && *e ? std::atoi(e) : d; }
extern "C" { int fake_nccl_aborts = 0; int fake_nccl_live_comms = 0; }
static size_t size_of(ncclDataType_t t) {
  switch (t) { case ncclInt8: case ncclUint8: return 1; case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4; default: return 8; } }
static ncclComm_t make(int rank, int n, int polls) {
  ++fake_nccl_live_comms; return new ncclComm{rank, n, polls, ncclInProgress, 0}; }
static ncclResult_t started(ncclComm_t c) {  // a call that completes after a few polls
  if (!env_int("FAKE_NCCL_CALLS_IN_PROGRESS", 0)) return ncclSuccess;
  c->state = ncclInProgress; c->polls = 2; return ncclInProgress; }
ncclResult_t ncclGetVersion(int* v) { *v = env_int("FAKE_NCCL_VERSION", 22809); return ncclSuccess; }
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) id->internal[i] = static_cast<char>(std::rand()); return ncclSuccess; }
ncclResult_t ncclCommInitRankConfig(ncclComm_t* c, int n, ncclUniqueId, int rank, ncclConfig_t* cfg) {
  if (cfg->blocking != 0) return ncclInvalidUsage;  // the helper must ask for nonblocking init
  *c = make(rank, n, 3); return ncclInProgress; }
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* st) {
  if (c->state == ncclInProgress && !env_int("FAKE_NCCL_INIT_HANG", 0) && --c->polls <= 0) c->state = ncclSuccess;
  const int after = env_int("FAKE_NCCL_REMOTE_ERROR_AFTER", -1);
  if (after >= 0 && c->calls > after) c->state = ncclRemoteError;
  *st = c->state; return ncclSuccess; }
ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t* out, ncclConfig_t*) {
  *out = color == NCCL_SPLIT_NOCOLOR ? nullptr : make(0, 1, 2); return ncclSuccess; }
ncclResult_t ncclCommFinalize(ncclComm_t c) { c->state = ncclInProgress; c->polls = 2; return ncclInProgress; }
ncclResult_t ncclCommDestroy(ncclComm_t c) { --fake_nccl_live_comms; delete c; return ncclSuccess; }
ncclResult_t ncclCommAbort(ncclComm_t c) { ++fake_nccl_aborts; --fake_nccl_live_comms; delete c; return ncclSuccess; }
const char* ncclGetErrorString(ncclResult_t) { return "fake nccl error"; }
const char* ncclGetLastError(ncclComm_t) { return "fake: peer 1 closed the connection"; }
ncclResult_t ncclCommCount(const ncclComm_t c, int* n) { *n = c->nranks; return ncclSuccess; }
ncclResult_t ncclCommUserRank(const ncclComm_t c, int* r) { *r = c->rank; return ncclSuccess; }
ncclResult_t ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t) {
  if (op >= ncclNumOps) return ncclInvalidArgument;
  ++c->calls; std::memmove(r, s, n * size_of(t)); return started(c); }
ncclResult_t ncclAllGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t) {
  ++c->calls; for (int i = 0; i < c->nranks; ++i) std::memmove(static_cast<char*>(r) + i * n * size_of(t), s, n * size_of(t));
  return started(c); }
ncclResult_t ncclReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t, ncclComm_t c, cudaStream_t) {
  ++c->calls; std::memmove(r, s, n * size_of(t)); return started(c); }
ncclResult_t ncclBroadcast(const void* s, void* r, size_t n, ncclDataType_t t, int, ncclComm_t c, cudaStream_t) {
  ++c->calls; std::memmove(r, s, n * size_of(t)); return started(c); }
ncclResult_t ncclReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t, int, ncclComm_t c, cudaStream_t) {
  ++c->calls; std::memmove(r, s, n * size_of(t)); return started(c); }
static const void* g_send = nullptr; static void* g_recv = nullptr; static size_t g_bytes = 0; static int g_depth = 0;
ncclResult_t ncclSend(const void* s, size_t n, ncclDataType_t t, int, ncclComm_t c, cudaStream_t) {
  if (!g_depth) return ncclInvalidUsage; ++c->calls; g_send = s; g_bytes = n * size_of(t); return ncclSuccess; }
ncclResult_t ncclRecv(void* r, size_t n, ncclDataType_t t, int, ncclComm_t c, cudaStream_t) {
  if (!g_depth) return ncclInvalidUsage; ++c->calls; g_recv = r; return ncclSuccess; }
ncclResult_t ncclGroupStart() { ++g_depth; return ncclSuccess; }
ncclResult_t ncclGroupEnd() {
  if (--g_depth == 0 && g_send && g_recv) { std::memmove(g_recv, g_send, g_bytes); g_send = nullptr; g_recv = nullptr; }
  return ncclSuccess; }
"""

WORKER = r"""
import ctypes, dataclasses, gc, os, sys, time
import numpy as np
import xpuruntime as x
import xpuruntime.distributed as xd
from xpuruntime.distributed import _collectives, _tensors
from xpuruntime.dispatch import log

nccl = ctypes.CDLL(os.environ["XRT_NCCL_LIBRARY"])
cuda = ctypes.CDLL(os.environ["XRT_CUDA_DRIVER_LIBRARY"])
def counter(lib, name): return ctypes.c_int.in_dll(lib, name).value
# Host arrays stand in for device memory (the double copies with memmove): mark them CUDA.
real = _tensors.describe
_collectives.describe = lambda t, n, w: dataclasses.replace(real(t, n, w), device_type="cuda")
T = x.Tensor.from_numpy
scenario = sys.argv[1]
rng = np.random.default_rng(7)

if scenario == "ok":
    assert xd.is_available(), xd.unavailable_reason()
    c = xd.Communicator.init(0, 1, xd.UniqueId.generate(), device=0, timeout=5)
    for dt in ("float32", "float16", "float64", "int32", "int64", "int8", "uint8"):
        a = (rng.random(37) * 100).astype(dt)
        outs = {k: np.zeros_like(a) for k in ("ar", "rs", "red", "recv")}
        gathered = np.zeros((1, 37), dt)
        for op in ("sum", "prod", "min", "max", "avg"):
            c.all_reduce(T(a), op=op, out=T(outs["ar"]), stream=0)
        c.all_gather(T(gathered), T(a), stream=0)
        c.reduce_scatter(T(outs["rs"]), T(a), stream=0)
        c.reduce(T(a), root=0, out=T(outs["red"]), stream=0)
        b = a.copy(); c.broadcast(T(b), root=0, stream=0)
        with xd.group():
            c.send(T(a), peer=0, stream=0)
            c.recv(T(outs["recv"]), peer=0, stream=0)
        for name, got in [*outs.items(), ("gather", gathered[0]), ("bcast", b)]:
            assert np.array_equal(got, a), (dt, name)
    w = c.all_reduce(T(a), stream=0, async_op=True)
    assert isinstance(w, xd.Work) and w.is_completed()
    w.wait(timeout=1); w.wait_stream(0)
    assert w.elapsed_ms() == 1.5
    child = c.split(0)
    assert (child.rank, child.world, child.device) == (0, 1, 0), child
    assert c.split(-1) is None
    child.destroy()
    c.check()
    ar = [d for d in log.decisions() if d.op == "nccl.all_reduce" and d.dtypes == ["uint8"]]
    # One decision per case (the reduction is part of it); the async sum was its second call.
    assert sorted(d.detail.split(";")[0] for d in ar) == ["op avg", "op max", "op min", "op prod", "op sum"], ar
    assert [d.hits for d in ar if d.detail.startswith("op sum")] == [2], ar
    c.destroy()
    del w; gc.collect()
    assert counter(nccl, "fake_nccl_aborts") == 0 and counter(nccl, "fake_nccl_live_comms") == 0
    assert counter(cuda, "fake_cuda_ctx_refs") == 0 and counter(cuda, "fake_cuda_live_events") == 0
elif scenario == "calls_in_progress":  # nonblocking collectives settle before returning
    c = xd.Communicator.init(0, 1, xd.UniqueId.generate(), device=0, timeout=5)
    a = rng.random(11).astype("float32"); out = np.zeros_like(a)
    c.all_reduce(T(a), out=T(out), stream=0)
    assert np.array_equal(out, a)
    c.destroy()
elif scenario == "init_hang":
    t0 = time.monotonic()
    try:
        xd.Communicator.init(0, 2, xd.UniqueId.generate(), device=0, timeout=0.3)
        raise SystemExit("init returned")
    except xd.CollectiveTimeoutError as e:
        assert "communicator init did not complete within" in str(e) and "rank 0 of 2" in str(e), e
    assert time.monotonic() - t0 < 3
    assert counter(nccl, "fake_nccl_aborts") == 1 and counter(cuda, "fake_cuda_ctx_refs") == 0
elif scenario in ("work_hang", "remote_error"):
    c = xd.Communicator.init(0, 1, xd.UniqueId.generate(), device=0, timeout=30)
    a = np.ones(8, np.float32)
    w = c.all_reduce(T(a), stream=0, async_op=True)
    if scenario == "work_hang":
        assert not w.is_completed()  # polling neither blocks nor fails
    t0 = time.monotonic()
    want = xd.CollectiveTimeoutError if scenario == "work_hang" else xd.CommunicatorAbortedError
    try:
        w.wait(timeout=0.3)
        raise SystemExit("wait returned")
    except want as e:
        text = str(e)
    assert time.monotonic() - t0 < 3
    if scenario == "remote_error":
        assert "fake: peer 1 closed the connection" in text and "was aborted" in text, text
    assert c.is_destroyed and counter(nccl, "fake_nccl_aborts") == 1
    try:
        c.all_reduce(T(a), stream=0)
        raise SystemExit("an aborted communicator ran a collective")
    except x.InvalidArgumentError as e:
        assert "is aborted" in str(e), e
    c.destroy()
    del w; gc.collect()
    assert counter(cuda, "fake_cuda_ctx_refs") == 0 and counter(cuda, "fake_cuda_live_events") == 0
elif scenario == "capturing":
    c = xd.Communicator.init(0, 1, xd.UniqueId.generate(), device=0, timeout=5)
    w = c.all_reduce(T(np.ones(4, np.float32)), stream=0, async_op=True)
    assert w.is_completed() and w.elapsed_ms() == 0.0  # captured: the graph owns completion
    assert counter(cuda, "fake_cuda_live_events") == 0
    c.destroy()
elif scenario == "old_nccl":
    r = xd.unavailable_reason()
    assert "version 21700 is older than 21800" in r, r
elif scenario == "no_device":
    assert "no CUDA device is visible" in xd.unavailable_reason()
elif scenario == "bad_device":
    try:
        xd.Communicator.init(0, 1, xd.UniqueId.generate(), device=3)
        raise SystemExit("init accepted a missing device")
    except x.InvalidArgumentError as e:
        assert "cuda:3 does not exist (1 visible)" in str(e), e
    assert counter(nccl, "fake_nccl_live_comms") == 0 and counter(cuda, "fake_cuda_ctx_refs") == 0
print("SCENARIO OK")
"""

SCENARIOS = {
    "ok": {},
    "calls_in_progress": {"FAKE_NCCL_CALLS_IN_PROGRESS": "1"},
    "init_hang": {"FAKE_NCCL_INIT_HANG": "1"},
    "work_hang": {"FAKE_CUDA_HANG": "1"},
    "remote_error": {"FAKE_CUDA_HANG": "1", "FAKE_NCCL_REMOTE_ERROR_AFTER": "0"},
    "capturing": {"FAKE_CUDA_CAPTURING": "1"},
    "old_nccl": {"FAKE_NCCL_VERSION": "21700"},
    "no_device": {"FAKE_CUDA_DEVICES": "0"},
    "bad_device": {},
}


@pytest.fixture(scope="module")
def doubles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if CXX is None or not (INCLUDE / "nccl.h").exists() or not (INCLUDE / "cuda.h").exists():
        pytest.skip("needs a C++ compiler and nccl.h/cuda.h in /usr/local/cuda/include")
    from xpuruntime.distributed import _lib

    try:
        _lib.library()
    except Exception as exc:  # noqa: BLE001 - the reason becomes the skip message
        pytest.skip(str(exc))
    out = tmp_path_factory.mktemp("nccl_doubles")
    libs = {}
    for name, src in (("nccl", FAKE_NCCL), ("cuda", FAKE_CUDA)):
        (out / f"fake_{name}.cpp").write_text(src)
        lib = out / f"libfake_{name}.so"
        subprocess.run(
            [
                CXX,
                "-std=c++17",
                "-shared",
                "-fPIC",
                "-O1",
                f"-I{INCLUDE}",
                "-o",
                str(lib),
                str(out / f"fake_{name}.cpp"),
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
        libs[name] = str(lib)
    (out / "worker.py").write_text(WORKER)
    libs["worker"] = str(out / "worker.py")
    return libs


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_helper_against_test_doubles(doubles: dict[str, str], scenario: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_", "NCCL_"))}
    env.update(SCENARIOS[scenario], XRT_NCCL_LIBRARY=doubles["nccl"], XRT_CUDA_DRIVER_LIBRARY=doubles["cuda"])
    out = subprocess.run(
        [sys.executable, doubles["worker"], scenario],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0 and "SCENARIO OK" in out.stdout, out.stdout + out.stderr
