// Registration of the CUDA Softmax / LogSoftmax kernels.
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime::cuda_ops {
void register_softmax_kernels(KernelRegistry& registry);
}  // namespace xpuruntime::cuda_ops
