// The NCCL helper (nccl_abi.h): communicators, collectives, grouped calls and
// work handles whose wait() turns a dead peer or a timeout into an error, not a
// hang.
//
// Communicators are created nonblocking (ncclConfig_t.blocking = 0) so that
// every NCCL call returns at once and we poll ncclCommGetAsyncError with a
// deadline: a rank that never joins init, or dies during a collective, ends in
// ncclCommAbort and a kXrtNcclTimeout / kXrtNcclRemoteError on the surviving
// ranks.
#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backends/nccl/nccl_abi.h"
#include "backends/nccl/nccl_library.h"

namespace xpuruntime::nccl {
namespace {

thread_local std::string g_error;

int fail(int status, std::string msg) {
  g_error = std::move(msg);
  return status;
}
int ok() {
  g_error.clear();
  return kXrtNcclOk;
}

struct Comm {
  ncclComm_t comm = nullptr;
  CUcontext ctx = nullptr;  // the device's primary context, retained while we live
  CUdevice dev = 0;
  int device = -1, rank = 0, world = 0;
  double timeout_s = 300.0;
  // Where ncclCommSplit stores the (null) result of a NCCL_SPLIT_NOCOLOR split: NCCL's
  // init thread writes it after the call may have returned, so it lives as long as
  // this (parent) communicator. A deque: slots never move as more are added.
  std::deque<ncclComm_t> nocolor_slots;
  std::string where() const {
    return "rank " + std::to_string(rank) + " of " + std::to_string(world) +
           " on cuda:" + std::to_string(device);
  }
};

struct Work {
  Comm* comm = nullptr;  // borrowed: the Python Work keeps its Communicator alive
  CUevent start = nullptr, end = nullptr;
  bool captured = false;  // enqueued inside graph capture: completion belongs to replays
};

// Loaded tables, or a kXrtNcclUnavailable status with the reason.
int tables(const NcclFns*& n, const CudaFns*& c) {
  std::string why;
  n = nccl_fns(&why);
  if (n == nullptr) return fail(kXrtNcclUnavailable, "NCCL unavailable: " + why);
  int v = 0;
  if (n->GetVersion(&v) != ncclSuccess || v < kXrtNcclMinVersion) {
    return fail(kXrtNcclUnavailable, "NCCL unavailable: version " + std::to_string(v) + " is older than " +
                                         std::to_string(kXrtNcclMinVersion) + "; install NCCL 2.18 or newer");
  }
  c = cuda_fns(&why);
  if (c == nullptr) return fail(kXrtNcclUnavailable, "NCCL unavailable: " + why);
  return kXrtNcclOk;
}

std::string cu_text(const CudaFns& c, CUresult rc) {
  const char* s = nullptr;
  c.GetErrorString(rc, &s);
  return std::to_string(static_cast<int>(rc)) + " (" + (s ? s : "unknown") + ")";
}

int cu_fail(const CudaFns& c, CUresult rc, const std::string& what) {
  return fail(kXrtNcclCudaError, what + " failed: CUDA driver error " + cu_text(c, rc));
}

std::string nccl_text(const NcclFns& n, ncclResult_t rc, ncclComm_t comm) {
  std::string s = std::string(n.GetErrorString(rc)) + " (" + std::to_string(static_cast<int>(rc)) + ")";
  const char* last = n.GetLastError(comm);
  if (last && *last) s += ": " + std::string(last);
  return s;
}

int bind(const CudaFns& c, const Comm& k) {
  const CUresult rc = c.CtxSetCurrent(k.ctx);
  return rc == CUDA_SUCCESS ? kXrtNcclOk
                            : cu_fail(c, rc, "making cuda:" + std::to_string(k.device) + " current");
}

void abort_comm(Comm& k) {
  if (k.comm != nullptr) nccl_fns(nullptr)->CommAbort(k.comm);
  k.comm = nullptr;
}

// Polls a nonblocking communicator until its pending operation left
// ncclInProgress.
int settle(Comm& k, const std::string& what, double timeout_s) {
  const NcclFns& n = *nccl_fns(nullptr);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (int spin = 0;; ++spin) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = n.CommGetAsyncError(k.comm, &state);
    if (rc != ncclSuccess) state = rc;
    if (state == ncclSuccess) return ok();
    if (state != ncclInProgress) {
      const std::string msg = what + " failed on " + k.where() + ": " + nccl_text(n, state, k.comm) +
                              ". The communicator was aborted: a peer rank may have died or called another "
                              "collective; create a new communicator";
      abort_comm(k);
      return fail(kXrtNcclRemoteError, msg);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      abort_comm(k);
      return fail(kXrtNcclTimeout, what + " did not complete within " + std::to_string(timeout_s) + " s on " +
                                       k.where() +
                                       ": a rank did not join or died. The communicator was aborted; check "
                                       "every rank runs the same calls, or raise timeout=");
    }
    if (spin > 64) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Communicators touched inside the calling thread's open ncclGroupStart/End.
thread_local int g_group_depth = 0;
thread_local std::vector<Comm*> g_group_comms;

Comm* as_comm(void* p, const char* what) {
  auto* k = static_cast<Comm*>(p);
  if (k == nullptr || k->comm == nullptr) {
    fail(kXrtNcclInvalidArgument,
         std::string(what) +
             ": the communicator was destroyed or aborted; create a new one with Communicator.init");
    return nullptr;
  }
  return k;
}

const char* kind_name(int kind) {
  static constexpr const char* kNames[] = {
      "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "send", "recv"};
  return (kind >= 0 && kind <= kXrtRecv) ? kNames[kind] : "collective";
}

}  // namespace
}  // namespace xpuruntime::nccl

using namespace xpuruntime::nccl;  // NOLINT: the extern "C" bodies below

extern "C" {

const char* xrt_nccl_last_error() { return g_error.c_str(); }

int xrt_nccl_prefer_library(const char* path) {
  prefer_nccl_library(path ? path : "");
  return ok();
}

int xrt_nccl_version(int* version) {
  std::string why;
  const NcclFns* n = nccl_fns(&why);
  if (n == nullptr) return fail(kXrtNcclUnavailable, "NCCL unavailable: " + why);
  if (n->GetVersion(version) != ncclSuccess) return fail(kXrtNcclError, "ncclGetVersion failed");
  return ok();
}

int xrt_nccl_probe(int* devices) {
  const NcclFns* n = nullptr;
  const CudaFns* c = nullptr;
  if (int st = tables(n, c)) return st;
  int count = 0;
  const CUresult rc = c->DeviceGetCount(&count);
  if (rc != CUDA_SUCCESS) return cu_fail(*c, rc, "cuDeviceGetCount");
  if (count < 1) return fail(kXrtNcclUnavailable, "NCCL unavailable: no CUDA device is visible");
  *devices = count;
  return ok();
}

int xrt_nccl_unique_id(uint8_t* out) {
  // Needs NCCL only (a bootstrap address), no GPU: rank 0 of a torch process
  // group on a CPU-only launcher host can still hand ids out.
  int v = 0;
  if (int st = xrt_nccl_version(&v)) return st;
  const NcclFns* n = nccl_fns(nullptr);
  ncclUniqueId id;
  static_assert(sizeof(id.internal) == kXrtNcclUniqueIdBytes);
  const ncclResult_t rc = n->GetUniqueId(&id);
  if (rc != ncclSuccess) {
    return fail(kXrtNcclError, "ncclGetUniqueId failed: " + nccl_text(*n, rc, nullptr) +
                                   " (no network interface for bootstrap? see NCCL_SOCKET_IFNAME)");
  }
  std::copy(id.internal, id.internal + kXrtNcclUniqueIdBytes, out);
  return ok();
}

int xrt_nccl_comm_init(int rank, int world, const uint8_t* unique_id, int device, double timeout_s,
                       void** out) {
  if (world < 1 || rank < 0 || rank >= world || unique_id == nullptr || timeout_s <= 0) {
    return fail(
        kXrtNcclInvalidArgument,
        "xrt_nccl_comm_init: need 0 <= rank < world, world >= 1, a unique id and timeout_s > 0 (got rank " +
            std::to_string(rank) + ", world " + std::to_string(world) + ")");
  }
  int devices = 0;
  if (int st = xrt_nccl_probe(&devices)) return st;
  if (device < 0 || device >= devices) {
    return fail(kXrtNcclInvalidArgument, "Communicator.init: device cuda:" + std::to_string(device) +
                                             " does not exist (" + std::to_string(devices) +
                                             " visible); pass device=<0.." + std::to_string(devices - 1) +
                                             ">");
  }
  const NcclFns& n = *nccl_fns(nullptr);
  const CudaFns& c = *cuda_fns(nullptr);
  auto k = std::make_unique<Comm>();
  k->device = device;
  k->rank = rank;
  k->world = world;
  k->timeout_s = timeout_s;
  if (CUresult rc = c.DeviceGet(&k->dev, device); rc != CUDA_SUCCESS) return cu_fail(c, rc, "cuDeviceGet");
  if (CUresult rc = c.PrimaryCtxRetain(&k->ctx, k->dev); rc != CUDA_SUCCESS) {
    return cu_fail(c, rc, "retaining the primary context of cuda:" + std::to_string(device));
  }
  // From here the context is ours: released by the guard unless the comm survives.
  struct CtxGuard {
    const CudaFns& c;
    Comm* k;
    ~CtxGuard() {
      if (k != nullptr) c.PrimaryCtxRelease(k->dev);
    }
  } guard{c, k.get()};
  if (int st = bind(c, *k)) return st;
  ncclUniqueId id;
  std::copy(unique_id, unique_id + kXrtNcclUniqueIdBytes, id.internal);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t rc = n.CommInitRankConfig(&k->comm, world, id, rank, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    if (k->comm != nullptr) abort_comm(*k);
    return fail(kXrtNcclError,
                "ncclCommInitRankConfig failed on " + k->where() + ": " + nccl_text(n, rc, nullptr));
  }
  if (int st = settle(*k, "communicator init", timeout_s)) return st;
  guard.k = nullptr;
  *out = k.release();  // owned by the caller until xrt_nccl_comm_destroy/abort
  return ok();
}

int xrt_nccl_comm_split(void* comm, int color, int key, void** out) {
  Comm* k = as_comm(comm, "Communicator.split");
  if (k == nullptr) return kXrtNcclInvalidArgument;
  const NcclFns& n = *nccl_fns(nullptr);
  const CudaFns& c = *cuda_fns(nullptr);
  if (int st = bind(c, *k)) return st;
  auto child = std::make_unique<Comm>(*k);  // same device, context and timeout
  child->comm = nullptr;
  child->nocolor_slots.clear();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  // A non-member's split still runs NCCL's init job, which stores its null result
  // into *newcomm from NCCL's own thread, possibly after this call returned: into
  // `child`, freed on return, that store corrupted the heap ("malloc(): unaligned
  // tcache chunk detected" when the GPU suite's process exited). It goes to a slot
  // the parent keeps instead.
  ncclComm_t* target = color < 0 ? &k->nocolor_slots.emplace_back(nullptr) : &child->comm;
  const ncclResult_t rc =
      n.CommSplit(k->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, target, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    return fail(kXrtNcclError, "ncclCommSplit failed on " + k->where() + ": " + nccl_text(n, rc, k->comm));
  }
  if (rc == ncclInProgress) {
    if (int st = settle(*k, "Communicator.split", k->timeout_s)) {
      // NCCL may still store the child's handle into child->comm from its init
      // thread: the Comm is leaked on purpose rather than freed under that write.
      (void)child.release();
      return st;
    }
  }
  if (color < 0) {  // not a member: NCCL creates no communicator for NCCL_SPLIT_NOCOLOR
    *out = nullptr;
    return ok();
  }
  // Non-blocking split: NCCL keeps *newcomm NULL "until comm split fully complete" and
  // stores the handle from its own init thread (init.cc, ncclCommInitRankFunc), which
  // can be after the parent reports success. Reading child->comm once here returned
  // None for a member (world size 1 on the H200), and freeing `child` then let that
  // late store write into freed heap. Wait for the store, bounded by the timeout.
  {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(k->timeout_s);
    while (__atomic_load_n(&child->comm, __ATOMIC_ACQUIRE) == nullptr) {
      if (std::chrono::steady_clock::now() > deadline) {
        (void)child.release();  // NCCL may still write child->comm: leaked, never freed under it
        return fail(kXrtNcclTimeout, "Communicator.split on " + k->where() + " did not produce the new "
                                     "communicator within " + std::to_string(k->timeout_s) +
                                     " s: a rank of the same color did not join; raise timeout= or check "
                                     "every rank calls split");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  if (int st = settle(*child, "Communicator.split", k->timeout_s)) return st;
  // The child's rank and size come from NCCL: split orders ranks by (key, old rank).
  if (n.CommUserRank(child->comm, &child->rank) != ncclSuccess ||
      n.CommCount(child->comm, &child->world) != ncclSuccess) {
    abort_comm(*child);
    return fail(kXrtNcclError, "reading the split communicator's rank and size failed on " + k->where());
  }
  // The child holds its own context reference (released by its destroy/abort).
  if (CUresult rc = c.PrimaryCtxRetain(&child->ctx, child->dev); rc != CUDA_SUCCESS) {
    abort_comm(*child);
    return cu_fail(c, rc, "retaining the primary context for the split communicator");
  }
  *out = child.release();
  return ok();
}

int xrt_nccl_comm_info(void* comm, int* rank, int* world) {
  Comm* k = as_comm(comm, "Communicator info");
  if (k == nullptr) return kXrtNcclInvalidArgument;
  *rank = k->rank;
  *world = k->world;
  return ok();
}

int xrt_nccl_comm_destroy(void* comm) {
  std::unique_ptr<Comm> k(static_cast<Comm*>(comm));
  if (k == nullptr) return ok();
  const CudaFns& c = *cuda_fns(nullptr);
  int st = kXrtNcclOk;
  if (k->comm != nullptr) {
    const NcclFns& n = *nccl_fns(nullptr);
    bind(c, *k);
    // Finalize flushes outstanding work (nonblocking: polled with the timeout, which
    // aborts on expiry so a dead peer cannot hang the destructor).
    const ncclResult_t rc = n.CommFinalize(k->comm);
    if (rc == ncclSuccess || rc == ncclInProgress) st = settle(*k, "Communicator.destroy", k->timeout_s);
    if (k->comm != nullptr) n.CommDestroy(k->comm);
    k->comm = nullptr;
  }
  c.PrimaryCtxRelease(k->dev);
  return st == kXrtNcclOk ? ok() : st;
}

int xrt_nccl_comm_abort(void* comm) {
  std::unique_ptr<Comm> k(static_cast<Comm*>(comm));
  if (k == nullptr) return ok();
  const CudaFns& c = *cuda_fns(nullptr);
  bind(c, *k);
  abort_comm(*k);
  c.PrimaryCtxRelease(k->dev);
  return ok();
}

int xrt_nccl_comm_check(void* comm) {
  Comm* k = as_comm(comm, "Communicator.check");
  if (k == nullptr) return kXrtNcclInvalidArgument;
  const NcclFns& n = *nccl_fns(nullptr);
  ncclResult_t state = ncclSuccess;
  const ncclResult_t rc = n.CommGetAsyncError(k->comm, &state);
  if (rc != ncclSuccess) state = rc;
  if (state == ncclSuccess || state == ncclInProgress) return ok();
  return fail(kXrtNcclRemoteError, "the communicator of " + k->where() + " is in error: " +
                                       nccl_text(n, state, k->comm) + "; abort it and create a new one");
}

int xrt_nccl_collective(void* comm, int kind, const void* send, void* recv, size_t count, int dtype,
                        int redop, int peer, void* stream) {
  Comm* k = as_comm(comm, kind_name(kind));
  if (k == nullptr) return kXrtNcclInvalidArgument;
  const bool rooted = kind == kXrtBroadcast || kind == kXrtReduce || kind == kXrtSend || kind == kXrtRecv;
  if (kind < kXrtAllReduce || kind > kXrtRecv || dtype < 0 || dtype >= ncclNumTypes || redop < 0 ||
      redop >= ncclNumOps || (rooted && (peer < 0 || peer >= k->world))) {
    return fail(kXrtNcclInvalidArgument, std::string(kind_name(kind)) + " on " + k->where() +
                                             ": bad kind, dtype, op or peer/root (peer " +
                                             std::to_string(peer) + "; must be in [0, world))");
  }
  const NcclFns& n = *nccl_fns(nullptr);
  const CudaFns& c = *cuda_fns(nullptr);
  if (int st = bind(c, *k)) return st;
  auto s = static_cast<cudaStream_t>(stream);
  const auto t = static_cast<ncclDataType_t>(dtype);
  const auto o = static_cast<ncclRedOp_t>(redop);
  ncclResult_t rc = ncclSuccess;
  switch (kind) {
    case kXrtAllReduce:
      rc = n.AllReduce(send, recv, count, t, o, k->comm, s);
      break;
    case kXrtAllGather:
      rc = n.AllGather(send, recv, count, t, k->comm, s);
      break;
    case kXrtReduceScatter:
      rc = n.ReduceScatter(send, recv, count, t, o, k->comm, s);
      break;
    case kXrtBroadcast:
      rc = n.Broadcast(send, recv, count, t, peer, k->comm, s);
      break;
    case kXrtReduce:
      rc = n.Reduce(send, recv, count, t, o, peer, k->comm, s);
      break;
    case kXrtSend:
      rc = n.Send(send, count, t, peer, k->comm, s);
      break;
    default:
      rc = n.Recv(recv, count, t, peer, k->comm, s);
      break;
  }
  if (rc == ncclInProgress) {
    if (g_group_depth > 0) {  // settled by the group's end
      g_group_comms.push_back(k);
      return ok();
    }
    return settle(*k, kind_name(kind), k->timeout_s);
  }
  if (rc != ncclSuccess) {
    return fail(kXrtNcclError,
                std::string(kind_name(kind)) + " failed on " + k->where() + ": " + nccl_text(n, rc, k->comm));
  }
  if (g_group_depth > 0) g_group_comms.push_back(k);
  return ok();
}

int xrt_nccl_group_start() {
  const NcclFns* n = nullptr;
  const CudaFns* c = nullptr;
  if (int st = tables(n, c)) return st;
  const ncclResult_t rc = n->GroupStart();
  if (rc != ncclSuccess) return fail(kXrtNcclError, "ncclGroupStart failed: " + nccl_text(*n, rc, nullptr));
  ++g_group_depth;
  return ok();
}

int xrt_nccl_group_end() {
  const NcclFns* n = nullptr;
  const CudaFns* c = nullptr;
  if (int st = tables(n, c)) return st;
  if (g_group_depth == 0)
    return fail(kXrtNcclInvalidArgument, "group end without a group start on this thread");
  const ncclResult_t rc = n->GroupEnd();
  --g_group_depth;
  std::vector<Comm*> comms;
  if (g_group_depth == 0) comms.swap(g_group_comms);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    return fail(kXrtNcclError, "ncclGroupEnd failed: " + nccl_text(*n, rc, nullptr));
  }
  // Nonblocking communicators finish the group asynchronously: poll each one.
  for (Comm* k : comms) {
    if (k->comm == nullptr) continue;
    if (int st = settle(*k, "the grouped calls", k->timeout_s)) return st;
  }
  return ok();
}

int xrt_nccl_stream_capturing(void* comm, void* stream, int* capturing) {
  Comm* k = as_comm(comm, "capture check");
  if (k == nullptr) return kXrtNcclInvalidArgument;
  const CudaFns& c = *cuda_fns(nullptr);
  if (int st = bind(c, *k)) return st;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult rc = c.StreamIsCapturing(static_cast<CUstream>(stream), &status);
  if (rc != CUDA_SUCCESS) return cu_fail(c, rc, "cuStreamIsCapturing");
  *capturing = status == CU_STREAM_CAPTURE_STATUS_NONE ? 0 : 1;
  return ok();
}

int xrt_nccl_work_begin(void* comm, void* stream, void** out) {
  Comm* k = as_comm(comm, "work");
  if (k == nullptr) return kXrtNcclInvalidArgument;
  int capturing = 0;
  if (int st = xrt_nccl_stream_capturing(comm, stream, &capturing)) return st;
  const CudaFns& c = *cuda_fns(nullptr);
  auto w = std::make_unique<Work>();
  w->comm = k;
  w->captured = capturing != 0;
  if (!w->captured) {  // a timing event pair; none inside capture (replays own
                       // completion)
    if (CUresult rc = c.EventCreate(&w->start, CU_EVENT_DEFAULT); rc != CUDA_SUCCESS) {
      return cu_fail(c, rc, "cuEventCreate");
    }
    if (CUresult rc = c.EventCreate(&w->end, CU_EVENT_DEFAULT); rc != CUDA_SUCCESS) {
      c.EventDestroy(w->start);
      return cu_fail(c, rc, "cuEventCreate");
    }
    if (CUresult rc = c.EventRecord(w->start, static_cast<CUstream>(stream)); rc != CUDA_SUCCESS) {
      xrt_nccl_work_destroy(w.release());
      return cu_fail(c, rc, "cuEventRecord");
    }
  }
  *out = w.release();  // owned by the caller until xrt_nccl_work_destroy
  return ok();
}

int xrt_nccl_work_end(void* work, void* stream) {
  auto* w = static_cast<Work*>(work);
  if (w == nullptr || w->captured) return ok();
  const CudaFns& c = *cuda_fns(nullptr);
  const CUresult rc = c.EventRecord(w->end, static_cast<CUstream>(stream));
  return rc == CUDA_SUCCESS ? ok() : cu_fail(c, rc, "cuEventRecord");
}

int xrt_nccl_work_query(void* work, int* done) {
  auto* w = static_cast<Work*>(work);
  *done = 1;
  if (w == nullptr || w->captured) return ok();
  if (w->comm->comm == nullptr) {
    return fail(kXrtNcclRemoteError, "the communicator of this work was aborted; its results are undefined");
  }
  const CudaFns& c = *cuda_fns(nullptr);
  const CUresult rc = c.EventQuery(w->end);
  if (rc == CUDA_SUCCESS) return ok();
  if (rc != CUDA_ERROR_NOT_READY) return cu_fail(c, rc, "cuEventQuery");
  *done = 0;
  // Not done: is a peer gone? (ncclCommGetAsyncError never blocks.)
  ncclResult_t state = ncclSuccess;
  nccl_fns(nullptr)->CommGetAsyncError(w->comm->comm, &state);
  if (state != ncclSuccess && state != ncclInProgress) return settle(*w->comm, "Work", 0.0);
  return ok();
}

int xrt_nccl_work_wait(void* work, double timeout_s) {
  auto* w = static_cast<Work*>(work);
  if (w == nullptr || w->captured) return ok();
  const double limit = timeout_s > 0 ? timeout_s : w->comm->timeout_s;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
  for (int spin = 0;; ++spin) {
    int done = 0;
    if (int st = xrt_nccl_work_query(work, &done)) return st;
    if (done) return ok();
    if (std::chrono::steady_clock::now() > deadline) {
      const std::string where = w->comm->where();
      abort_comm(*w->comm);
      return fail(kXrtNcclTimeout, "the collective did not complete within " + std::to_string(limit) +
                                       " s on " + where +
                                       ": a peer rank died or did not call the same collective. The "
                                       "communicator was aborted; create a new one (or raise timeout=)");
    }
    if (spin > 64) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

int xrt_nccl_work_stream_wait(void* work, void* stream) {
  auto* w = static_cast<Work*>(work);
  if (w == nullptr || w->captured) return ok();
  const CudaFns& c = *cuda_fns(nullptr);
  const CUresult rc = c.StreamWaitEvent(static_cast<CUstream>(stream), w->end, 0);
  return rc == CUDA_SUCCESS ? ok() : cu_fail(c, rc, "cuStreamWaitEvent");
}

int xrt_nccl_work_elapsed_ms(void* work, float* ms) {
  auto* w = static_cast<Work*>(work);
  *ms = 0.0f;
  if (w == nullptr || w->captured) return ok();
  const CudaFns& c = *cuda_fns(nullptr);
  const CUresult rc = c.EventElapsedTime(ms, w->start, w->end);
  return rc == CUDA_SUCCESS ? ok() : cu_fail(c, rc, "cuEventElapsedTime");
}

int xrt_nccl_work_destroy(void* work) {
  std::unique_ptr<Work> w(static_cast<Work*>(work));
  if (w == nullptr) return ok();
  const CudaFns& c = *cuda_fns(nullptr);
  if (w->start != nullptr) c.EventDestroy(w->start);
  if (w->end != nullptr) c.EventDestroy(w->end);
  return ok();
}

}  // extern "C"
