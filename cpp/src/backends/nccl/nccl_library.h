// Tables of NCCL and CUDA-driver entry points, resolved with dlopen/dlsym on
// first use (IREE's dynamic symbol tables): the helper builds against the
// headers only and runs where the libraries are absent, reporting why.
// Thread-safe (resolved once).
#pragma once

#include <cuda.h>
#include <nccl.h>

#include <string>

namespace xpuruntime::nccl {

// The function types come from the headers, so a signature can never drift.
struct NcclFns {
  decltype(&ncclGetVersion) GetVersion = nullptr;
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitRankConfig) CommInitRankConfig = nullptr;
  decltype(&ncclCommSplit) CommSplit = nullptr;
  decltype(&ncclCommFinalize) CommFinalize = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
  decltype(&ncclCommAbort) CommAbort = nullptr;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&ncclCommCount) CommCount = nullptr;
  decltype(&ncclCommUserRank) CommUserRank = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclGetLastError) GetLastError = nullptr;
  decltype(&ncclAllReduce) AllReduce = nullptr;
  decltype(&ncclAllGather) AllGather = nullptr;
  decltype(&ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&ncclBroadcast) Broadcast = nullptr;
  decltype(&ncclReduce) Reduce = nullptr;
  decltype(&ncclSend) Send = nullptr;
  decltype(&ncclRecv) Recv = nullptr;
  decltype(&ncclGroupStart) GroupStart = nullptr;
  decltype(&ncclGroupEnd) GroupEnd = nullptr;
};

struct CudaFns {
  decltype(&cuInit) Init = nullptr;
  decltype(&cuGetErrorString) GetErrorString = nullptr;
  decltype(&cuDeviceGetCount) DeviceGetCount = nullptr;
  decltype(&cuDeviceGet) DeviceGet = nullptr;
  decltype(&cuDevicePrimaryCtxRetain) PrimaryCtxRetain = nullptr;
  decltype(&cuDevicePrimaryCtxRelease) PrimaryCtxRelease = nullptr;
  decltype(&cuCtxSetCurrent) CtxSetCurrent = nullptr;
  decltype(&cuEventCreate) EventCreate = nullptr;
  decltype(&cuEventRecord) EventRecord = nullptr;
  decltype(&cuEventQuery) EventQuery = nullptr;
  decltype(&cuEventDestroy) EventDestroy = nullptr;
  decltype(&cuEventElapsedTime) EventElapsedTime = nullptr;
  decltype(&cuStreamWaitEvent) StreamWaitEvent = nullptr;
  decltype(&cuStreamIsCapturing) StreamIsCapturing = nullptr;
};

// A libnccl.so.2 path to try before the library path (torch's pip NCCL);
// effective only before the first nccl_fns() call.
void prefer_nccl_library(const std::string& path);
// The NCCL table, or nullptr with *why (library not found, symbol missing).
// NCCL's version is checked by the caller (it needs only GetVersion).
const NcclFns* nccl_fns(std::string* why);
// The driver table after cuInit, or nullptr with *why (no driver, cuInit
// failed: no device or a broken driver).
const CudaFns* cuda_fns(std::string* why);

}  // namespace xpuruntime::nccl
