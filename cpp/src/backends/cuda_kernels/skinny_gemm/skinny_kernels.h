// Registration of our skinny (M <= 16) split-K matmul kernel ("skinny"); the CUDA
// plugin's xpuruntime_register_kernels entry point calls it. Thread-safe.
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime {

void register_skinny_kernels(KernelRegistry& registry);

}  // namespace xpuruntime
