// The one exported symbol of libxpuruntime_cuda.so, xpuruntime_plugin_init
// (xpuruntime/plugin.h): the CUDA DeviceBackend, its execution provider, the kernel
// registration and the lookup of the entry points other parts call
// (cuda_kernels_abi.h names). The link exports nothing else (plugin.map). No
// exception or abort escapes: a machine without a driver or a GPU gets a backend
// that reports 0 devices and the reason.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "backends/cuda/cuda_kind.h"
#include "backends/cuda/kernels/blas/cublas_kernels.h"
#include "backends/cuda/kernels/blas/cublaslt_kernels.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_entries.h"
#include "backends/cuda/cuda_nvtx.h"
#include "backends/cuda/cuda_provider.h"
#include "backends/cuda/kernels/cuda_op_kernels.h"
#include "backends/cuda/kernels/conv/conv_cudnn_kernels.h"
#include "backends/cuda/kernels/column_sums/column_sums_impl.h"
#include "backends/cuda/kernels/flash_v2/flash_v2_impl.h"
#include "backends/cuda/kernels/kernel_defs.h"
#include "backends/cuda/kernels/layernorm/layernorm_impl.h"
#include "backends/cuda/kernels/blas/skinny_kernels.h"
#include "xpuruntime/cuda_kernels_abi.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/plugin.h"

namespace xpuruntime::cuda {
namespace {

namespace ck = cuda_kernels;

struct NamedEntry {
  const char* name;
  void* address;
};

template <typename Fn>
void* address_of(Fn fn) {
  return reinterpret_cast<void*>(fn);
}

// Every entry point of this plugin, by the name callers pass to plugin_lookup.
const NamedEntry kEntries[] = {
    {ck::entry::kFlashForward, address_of(&ck::flash_attention_forward_entry)},
    {ck::entry::kFlashBackward, address_of(&ck::flash_attention_backward_entry)},
    {ck::entry::kLayerNormForward, address_of(&ck::layernorm_forward_entry)},
    {ck::entry::kLayerNormBackward, address_of(&ck::layernorm_backward_entry)},
    {ck::entry::kLayerNormBackwardWorkspace, address_of(&ck::layernorm_backward_workspace_entry)},
    {ck::entry::kLayerNormSetConfig, address_of(&ck::layernorm_set_config_entry)},
    {ck::entry::kLayerNormDescribeConfig, address_of(&ck::layernorm_describe_config_entry)},
    {ck::entry::kColumnSums, address_of(&ck::column_sums_entry)},
    {ck::entry::kColumnSumsWorkspace, address_of(&ck::column_sums_workspace_entry)},
    {ck::entry::kStridedCopy, address_of(&strided_copy_entry)},
    {ck::entry::kTestSpin, address_of(&test_spin)},
    {ck::entry::kTestAxpy, address_of(&test_axpy)},
    {ck::entry::kTestErrorName, address_of(&test_error_name)},
};

void* lookup(const char* name) {
  if (name == nullptr) return nullptr;
  for (const NamedEntry& e : kEntries) {
    if (std::strcmp(e.name, name) == 0) return e.address;
  }
  return nullptr;
}

using RegisterFn = void (*)(KernelRegistry&);
struct KernelFamily {
  const char* name;
  RegisterFn fn;
};
// The kernel families of this plugin, one registration function each. Add a family
// here when its folder gains one.
constexpr KernelFamily kFamilies[] = {
    {"cublas", &register_cublas_kernels},
    {"cublasLt", &register_cublaslt_kernels},
    {"skinny", &register_skinny_kernels},
    {"flash_v2, fused layernorm, column_sums", &ck::register_cuda_kernel_defs},
    {"cuda_ops", &register_cuda_op_kernels},
    {"cudnn conv", &register_cudnn_conv_kernels},
};

// Each family registers independently: one that fails is reported on stderr and the
// others still load.
void register_kernels(KernelRegistry& registry) {
  for (const KernelFamily& f : kFamilies) {
    try {
      f.fn(registry);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "xpuruntime: registering the %s kernels failed: %s\n", f.name, e.what());
    }
  }
}

// Lives until process exit by contract and is never destroyed: caching allocators
// and streams owned by other static objects may still release device memory
// through it while the process tears down.
CudaBackend* backend_instance() {
  static CudaBackend* const backend = new CudaBackend();
  static const bool hooks_installed = [] {
    install_nvtx_hooks();
    return true;
  }();
  (void)hooks_installed;
  return backend;
}

}  // namespace
}  // namespace xpuruntime::cuda

extern "C" __attribute__((visibility("default"))) int xpuruntime_plugin_init(int api_version,
                                                                             xpuruntime::PluginEntry* out) {
  if (out == nullptr) return 1;
  out->api_version = xpuruntime::kPluginApiVersion;
  out->device_type = ::xpuruntime::cuda::kind();
  if (api_version != xpuruntime::kPluginApiVersion) {
    out->unavailable_reason = "the CUDA plugin implements plugin API version " +
                              std::to_string(xpuruntime::kPluginApiVersion) + ", the core asked for " +
                              std::to_string(api_version) + "; install matching builds of both";
    return 1;
  }
  out->lookup = &xpuruntime::cuda::lookup;
  out->register_kernels = &xpuruntime::cuda::register_kernels;
  try {
    xpuruntime::cuda::CudaBackend* backend = xpuruntime::cuda::backend_instance();
    out->backend = backend;
    out->unavailable_reason = backend->unavailable_reason();
    // Registered even without a usable device: compiling for "cuda" then says why
    // CUDA is unavailable instead of that no provider exists.
    out->provider = xpuruntime::cuda::make_cuda_provider(*backend);
    return 0;
  } catch (const std::exception& e) {
    out->unavailable_reason = std::string("CUDA backend failed to initialize: ") + e.what();
  } catch (...) {
    out->unavailable_reason = "CUDA backend failed to initialize (unknown exception)";
  }
  return 1;
}
