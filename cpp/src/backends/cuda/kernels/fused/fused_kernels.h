// Registration of the CUDA FusedElementwise kernel (NVRTC-compiled per program).
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime::cuda_ops {
void register_fused_kernels(KernelRegistry& registry);
}  // namespace xpuruntime::cuda_ops
