// Entry points of libxpuruntime_cuda.so that the core resolves with dlsym:
//   xpuruntime_create_backend   -> the CUDA DeviceBackend (kBackendPluginSymbol)
//   xpuruntime_register_kernels -> registers the CUDA kernel providers
// Neither lets an exception or an abort escape: a machine without a driver or a
// GPU gets a backend that reports 0 devices and the reason.
#include <cstdio>
#include <exception>
#include <string>

#include "backends/cublas/cublas_kernels.h"
#include "backends/cublaslt/cublaslt_kernels.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_nvtx.h"
#include "backends/cuda_kernels/skinny_gemm/skinny_kernels.h"
#include "xpuruntime/kernel_registry.h"

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

namespace {
using RegisterFn = void (*)(xpuruntime::KernelRegistry&);
struct Provider {
  const char* name;
  RegisterFn fn;
};
// The CUDA kernel providers of this plugin, one registration function per folder
// under cpp/src/backends/. Add a provider here when its folder gains one.
constexpr Provider kProviders[] = {
    {"cublas", &xpuruntime::register_cublas_kernels},
    {"cublasLt", &xpuruntime::register_cublaslt_kernels},
    {"skinny", &xpuruntime::register_skinny_kernels},
};
}  // namespace

// `kernel_registry` is a xpuruntime::KernelRegistry*. Each provider registers
// independently: one that fails is reported on stderr and the others still load.
extern "C" void xpuruntime_register_kernels(void* kernel_registry) {
  if (kernel_registry == nullptr) return;
  auto& registry = *static_cast<xpuruntime::KernelRegistry*>(kernel_registry);
  for (const Provider& p : kProviders) {
    try {
      p.fn(registry);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "xpuruntime: registering the %s kernels failed: %s\n", p.name, e.what());
    }
  }
}
