// Registration of the cuBLASLt matmul kernel ("cublasLt"); the CUDA plugin's
// xpuruntime_register_kernels entry point calls it. Thread-safe.
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime {

void register_cublaslt_kernels(KernelRegistry& registry);

}  // namespace xpuruntime
