// Registers the index kernels: GatherND, ScatterND, ScatterElements.
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime::cuda_ops {
void register_index_kernels(KernelRegistry& registry);
}
