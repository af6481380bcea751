// Error checking for CUDA runtime calls inside the CUDA plugin.
// XRT_CUDA_CHECK(call) throws CudaError naming the call, the error's name and
// string and the source location; it also clears the runtime's last-error slot so
// a recoverable failure (a bad argument, an out-of-memory) does not resurface in
// an unrelated later cudaGetLastError(). Sticky errors (a faulted kernel) stay
// sticky: CUDA itself keeps returning them and the process must restart.
#pragma once

#include <cuda_runtime_api.h>

#include <new>
#include <string>

#include "xpuruntime/error.h"

namespace xpuruntime::cuda {

// "cudaMalloc(&p, n) failed: cudaErrorInvalidValue (invalid argument) [file:line]"
[[noreturn]] void throw_cuda_error(const char* call, cudaError_t err, const char* file, int line);

// Human-readable "cudaErrorNoDevice (no CUDA-capable device is detected)".
std::string cuda_error_text(cudaError_t err);

// Makes `index` the calling thread's current device for the guard's lifetime and
// restores the previous one after (like c10::cuda::CUDAGuard). Switching costs a
// thread-local lookup when the device is already current.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);                  // throws CudaError
  DeviceGuard(int index, std::nothrow_t) noexcept;  // best effort, for cleanup paths
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

}  // namespace xpuruntime::cuda

#define XRT_CUDA_CHECK(call)                                                       \
  do {                                                                             \
    const cudaError_t xrt_cuda_err_ = (call);                                      \
    if (xrt_cuda_err_ != cudaSuccess) {                                            \
      ::xpuruntime::cuda::throw_cuda_error(#call, xrt_cuda_err_, __FILE__, __LINE__); \
    }                                                                              \
  } while (0)
