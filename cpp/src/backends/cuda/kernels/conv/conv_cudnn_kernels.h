// Conv (op key "conv") on CUDA through cuDNN's legacy v9 API: kernel "cudnn",
// provider "cudnn" (see conv_cudnn.cpp). The plugin entry point calls the
// registration once.
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime {

// Registers ("conv", "cudnn") when the plugin was built with cuDNN; otherwise
// only declares the name, so a policy naming it still validates (the kernel is
// then simply not a candidate on this build).
void register_cudnn_conv_kernels(KernelRegistry& registry);

}  // namespace xpuruntime
