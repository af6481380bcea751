// Registration of the CUDA reduction, global pooling and CumSum kernels.
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime::cuda_ops {
void register_reduce_kernels(KernelRegistry& registry);
}  // namespace xpuruntime::cuda_ops
