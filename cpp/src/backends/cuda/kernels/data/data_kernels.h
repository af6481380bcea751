// Registration of the CUDA data-movement kernels.
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime::cuda_ops {
void register_data_kernels(KernelRegistry& registry);
}  // namespace xpuruntime::cuda_ops
