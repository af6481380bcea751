// Registers the Resize kernel (nearest and linear modes).
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime::cuda_ops {
void register_resize_kernels(KernelRegistry& registry);
}
