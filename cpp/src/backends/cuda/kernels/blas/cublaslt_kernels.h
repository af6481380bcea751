// Registration of the cuBLASLt matmul kernel ("cublasLt"); the CUDA plugin's
// xpuruntime_plugin_init entry registers it when the plugin loads. Thread-safe.
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime {

void register_cublaslt_kernels(KernelRegistry& registry);

}  // namespace xpuruntime
