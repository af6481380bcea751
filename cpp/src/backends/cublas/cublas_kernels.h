// Registration of the cuBLAS matmul kernel ("cublas"); the CUDA plugin's
// xpuruntime_register_kernels entry point calls it. Thread-safe.
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime {

void register_cublas_kernels(KernelRegistry& registry);

}  // namespace xpuruntime
