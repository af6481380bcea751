// Registration of our skinny (M <= 16) split-K matmul kernel ("skinny"); the CUDA
// plugin's xpuruntime_plugin_init entry registers it when the plugin loads. Thread-safe.
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime {

void register_skinny_kernels(KernelRegistry& registry);

}  // namespace xpuruntime
