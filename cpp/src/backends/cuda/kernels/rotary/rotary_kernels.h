// Registration of the CUDA RotaryHalf kernel.
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime::cuda_ops {
void register_rotary_kernels(KernelRegistry &registry);
}  // namespace xpuruntime::cuda_ops
