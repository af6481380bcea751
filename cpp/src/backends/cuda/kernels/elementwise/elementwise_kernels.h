// Registration of the elementwise CUDA op kernels (called by register_cuda_op_kernels).
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime::cuda_ops {
void register_elementwise_kernels(KernelRegistry& registry);
}  // namespace xpuruntime::cuda_ops
