// The built-in CPU plugin (plugin.h): the same entry shape as a plugin library's
// xpuruntime_plugin_init, linked into the core instead of dlopen'ed. It hands the
// core the CPU backend, the CPU execution provider and the CPU kernels.
#include <cstring>
#include <exception>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_provider.h"
#include "backends/cpu/kernels/matmul/cpu_gemm_impl.h"
#include "backends/cpu/kernels/onednn/onednn_context.h"
#include "backends/cpu/kernels/gemm_call.h"
#include "backends/cpu/kernels/isa_clones.h"
#include "xpuruntime/cpu_plugin_abi.h"
#include "xpuruntime/plugin.h"

namespace xpuruntime {
namespace {

std::size_t scratch_peak_bytes() noexcept { return cpu::scratch_peak_bytes(); }

void gemm_info(std::string* isa, bool* blas_available, std::string* blas) {
  if (isa != nullptr) *isa = std::string(matmul::cpu_isa_name(matmul::CpuIsa::kAuto));
  if (blas_available != nullptr) *blas_available = matmul::cpu_blas_available();
  if (blas != nullptr) *blas = matmul::cpu_blas_info();
}

void kernel_info(std::string* vector_isa, std::string* onednn) {
  if (vector_isa != nullptr) *vector_isa = cpu::isa_clone_level();
  if (onednn != nullptr) *onednn = cpu::onednn::onednn_info();
}

// The CPU plugin's entry points, by the name callers pass to plugin_lookup("cpu", ...).
void* lookup(const char* name) {
  if (name == nullptr) return nullptr;
  if (std::strcmp(name, cpu::entry::kScratchPeakBytes) == 0) {
    return reinterpret_cast<void*>(static_cast<cpu::ScratchPeakBytesEntry>(&scratch_peak_bytes));
  }
  if (std::strcmp(name, cpu::entry::kGemmInfo) == 0) {
    return reinterpret_cast<void*>(static_cast<cpu::GemmInfoEntry>(&gemm_info));
  }
  if (std::strcmp(name, cpu::entry::kKernelInfo) == 0) {
    return reinterpret_cast<void*>(static_cast<cpu::KernelInfoEntry>(&kernel_info));
  }
  return nullptr;
}

}  // namespace

int cpu_plugin_init(int api_version, PluginEntry* out) {
  if (out == nullptr) return 1;
  out->api_version = kPluginApiVersion;
  out->device_type = DeviceKind::cpu();
  if (api_version != kPluginApiVersion) {
    out->unavailable_reason = "the CPU plugin implements plugin API version " +
                              std::to_string(kPluginApiVersion) + ", the core asked for " +
                              std::to_string(api_version);
    return 1;
  }
  try {
    out->backend = &cpu_backend();
    out->provider = cpu::make_cpu_provider();
    out->register_kernels = &register_cpu_kernels;
    out->lookup = &lookup;
    return 0;
  } catch (const std::exception& e) {
    out->unavailable_reason = std::string("the CPU plugin failed to initialize: ") + e.what();
  }
  return 1;
}

}  // namespace xpuruntime
