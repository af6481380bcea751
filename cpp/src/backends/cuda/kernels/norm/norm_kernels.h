// Registers the normalization kernels of this folder: InstanceNormalization.
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime::cuda_ops {
void register_norm_kernels(KernelRegistry& registry);
}
