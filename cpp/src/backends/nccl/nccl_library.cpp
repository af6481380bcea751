// dlopen tables for NCCL and the CUDA driver (nccl_library.h).
#include "backends/nccl/nccl_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace xpuruntime::nccl {
namespace {

// The exported name of a header function: cuda.h maps some names to versioned
// ABI symbols with macros (cuEventDestroy -> cuEventDestroy_v2), so the name is
// taken after macro expansion, matching the decltype'd signature.
#define XRT_SYM_NAME2(x) #x
#define XRT_SYM_NAME(x) XRT_SYM_NAME2(x)

template <typename Fn>
bool resolve(void* lib, const char* name, Fn& out, std::string& missing) {
  out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (out == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(name);
  return out != nullptr;
}

void* open_first(std::initializer_list<const char*> names, std::string& tried) {
  for (const char* n : names) {
    // RTLD_GLOBAL is not needed: every symbol is reached through dlsym.
    if (void* h = dlopen(n, RTLD_NOW | RTLD_LOCAL)) return h;
    const char* err = dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + (err ? err : n);
  }
  return nullptr;
}

std::mutex g_preferred_mu;
std::string& preferred_slot() {
  static std::string path;
  return path;
}
std::string preferred_library() {
  std::lock_guard<std::mutex> lock(g_preferred_mu);
  return preferred_slot();
}

struct Loaded {
  NcclFns nccl;
  CudaFns cuda;
  std::string nccl_why, cuda_why;
  bool nccl_ok = false, cuda_ok = false;
};

Loaded load_nccl() {
  Loaded l;
  std::string tried;
  // One NCCL per process, the one torch uses: a libnccl.so.2 loaded by a path
  // would satisfy torch's own DT_NEEDED libnccl.so.2 too (the loader matches
  // sonames), so a system NCCL older than torch's breaks `import torch`
  // afterwards. Order: XRT_NCCL_LIBRARY; an NCCL already loaded (torch imported
  // first); the preferred path (torch's pip NCCL, set by Python); then the
  // library path.
  const char* env = std::getenv("XRT_NCCL_LIBRARY");
  void* lib = nullptr;
  if (env && *env) {
    lib = open_first({env}, tried);
  } else {
    lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
    const std::string preferred = preferred_library();
    if (lib == nullptr && !preferred.empty()) lib = open_first({preferred.c_str()}, tried);
    if (lib == nullptr) lib = open_first({"libnccl.so.2", "libnccl.so"}, tried);
  }
  if (lib == nullptr) {
    l.nccl_why = "libnccl.so.2 not found (" + tried +
                 "). Install NCCL 2.18+ (pip install nvidia-nccl-cu12, or the CUDA toolkit's), put it on "
                 "LD_LIBRARY_PATH or set XRT_NCCL_LIBRARY to its path";
    return l;
  }
  std::string missing;
  NcclFns& f = l.nccl;
#define XRT_NCCL(field, sym) resolve(lib, XRT_SYM_NAME(sym), f.field, missing)
  XRT_NCCL(GetVersion, ncclGetVersion);
  XRT_NCCL(GetUniqueId, ncclGetUniqueId);
  XRT_NCCL(CommInitRankConfig, ncclCommInitRankConfig);
  XRT_NCCL(CommSplit, ncclCommSplit);
  XRT_NCCL(CommFinalize, ncclCommFinalize);
  XRT_NCCL(CommDestroy, ncclCommDestroy);
  XRT_NCCL(CommAbort, ncclCommAbort);
  XRT_NCCL(CommGetAsyncError, ncclCommGetAsyncError);
  XRT_NCCL(CommCount, ncclCommCount);
  XRT_NCCL(CommUserRank, ncclCommUserRank);
  XRT_NCCL(GetErrorString, ncclGetErrorString);
  XRT_NCCL(GetLastError, ncclGetLastError);
  XRT_NCCL(AllReduce, ncclAllReduce);
  XRT_NCCL(AllGather, ncclAllGather);
  XRT_NCCL(ReduceScatter, ncclReduceScatter);
  XRT_NCCL(Broadcast, ncclBroadcast);
  XRT_NCCL(Reduce, ncclReduce);
  XRT_NCCL(Send, ncclSend);
  XRT_NCCL(Recv, ncclRecv);
  XRT_NCCL(GroupStart, ncclGroupStart);
  XRT_NCCL(GroupEnd, ncclGroupEnd);
#undef XRT_NCCL
  if (!missing.empty()) {
    l.nccl_why =
        "the loaded libnccl lacks " + missing + " (NCCL older than 2.18?): install NCCL 2.18 or newer";
    return l;
  }
  l.nccl_ok = true;
  return l;
}

void load_cuda(Loaded& l) {
  std::string tried;
  // XRT_CUDA_DRIVER_LIBRARY: a specific driver (a CUDA forward-compat libcuda, or the
  // test double of tests/python/test_distributed_fake.py).
  const char* env = std::getenv("XRT_CUDA_DRIVER_LIBRARY");
  void* lib = (env && *env) ? open_first({env}, tried) : open_first({"libcuda.so.1", "libcuda.so"}, tried);
  if (lib == nullptr) {
    l.cuda_why = "the CUDA driver (libcuda.so.1) is not installed (" + tried +
                 "): NCCL needs an NVIDIA GPU and its driver";
    return;
  }
  std::string missing;
  CudaFns& f = l.cuda;
#define XRT_CU(field, sym) resolve(lib, XRT_SYM_NAME(sym), f.field, missing)
  XRT_CU(Init, cuInit);
  XRT_CU(GetErrorString, cuGetErrorString);
  XRT_CU(DeviceGetCount, cuDeviceGetCount);
  XRT_CU(DeviceGet, cuDeviceGet);
  XRT_CU(PrimaryCtxRetain, cuDevicePrimaryCtxRetain);
  XRT_CU(PrimaryCtxRelease, cuDevicePrimaryCtxRelease);
  XRT_CU(CtxSetCurrent, cuCtxSetCurrent);
  XRT_CU(EventCreate, cuEventCreate);
  XRT_CU(EventRecord, cuEventRecord);
  XRT_CU(EventQuery, cuEventQuery);
  XRT_CU(EventDestroy, cuEventDestroy);
  // cuEventElapsedTime_v2 (CUDA 12.8+ drivers) or the original, same signature.
  const std::string missing_before = missing;
  if (!resolve(lib, XRT_SYM_NAME(cuEventElapsedTime), f.EventElapsedTime, missing)) {
    std::string unused;
    if (resolve(lib, "cuEventElapsedTime", f.EventElapsedTime, unused)) missing = missing_before;
  }
  XRT_CU(StreamWaitEvent, cuStreamWaitEvent);
  XRT_CU(StreamIsCapturing, cuStreamIsCapturing);
#undef XRT_CU
  if (!missing.empty()) {
    l.cuda_why = "the CUDA driver lacks " + missing + ": update the NVIDIA driver";
    return;
  }
  const CUresult rc = f.Init(0);
  if (rc != CUDA_SUCCESS) {
    const char* s = nullptr;
    f.GetErrorString(rc, &s);
    l.cuda_why = "no usable CUDA device: cuInit failed with " + std::to_string(static_cast<int>(rc)) + " (" +
                 (s ? s : "unknown") + "); check nvidia-smi and CUDA_VISIBLE_DEVICES";
    return;
  }
  l.cuda_ok = true;
}

// Libraries stay loaded until exit (no dlclose): NCCL's threads may still run.
Loaded& loaded_nccl() {
  static Loaded l = load_nccl();
  return l;
}

}  // namespace

void prefer_nccl_library(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_preferred_mu);
  preferred_slot() = path;
}

const NcclFns* nccl_fns(std::string* why) {
  Loaded& l = loaded_nccl();
  if (!l.nccl_ok && why) *why = l.nccl_why;
  return l.nccl_ok ? &l.nccl : nullptr;
}

const CudaFns* cuda_fns(std::string* why) {
  static std::once_flag once;
  Loaded& l = loaded_nccl();
  std::call_once(once, [&] { load_cuda(l); });
  if (!l.cuda_ok && why) *why = l.cuda_why;
  return l.cuda_ok ? &l.cuda : nullptr;
}

}  // namespace xpuruntime::nccl
