// Entry points of libxpuruntime_cuda.so that the core resolves with dlsym:
//   xpuruntime_create_backend   -> the CUDA DeviceBackend (kBackendPluginSymbol)
//   xpuruntime_register_kernels -> registers the CUDA kernel providers
// Neither lets an exception or an abort escape: a machine without a driver or a
// GPU gets a backend that reports 0 devices and the reason.
#include <exception>
#include <string>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_nvtx.h"

extern "C" xpuruntime::DeviceBackend* xpuruntime_create_backend(std::string* why) {
  try {
    // Lives until process exit by contract and is never destroyed: caching
    // allocators and streams owned by other static objects may still release
    // device memory through it while the process tears down.
    static xpuruntime::cuda::CudaBackend* const backend = new xpuruntime::cuda::CudaBackend();
    static const bool hooks_installed = [] {
      xpuruntime::cuda::install_nvtx_hooks();
      return true;
    }();
    (void)hooks_installed;
    if (why != nullptr) *why = backend->unavailable_reason();
    return backend;
  } catch (const std::exception& e) {
    if (why != nullptr) *why = std::string("CUDA backend failed to initialize: ") + e.what();
  } catch (...) {
    if (why != nullptr) *why = "CUDA backend failed to initialize (unknown exception)";
  }
  return nullptr;
}
