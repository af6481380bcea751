// Registration of the CUDA pooling and inference BatchNormalization kernels.
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime::cuda_ops {
void register_pool_kernels(KernelRegistry& registry);
}  // namespace xpuruntime::cuda_ops
