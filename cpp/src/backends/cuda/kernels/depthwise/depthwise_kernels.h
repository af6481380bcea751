// Registration of the channels-last depthwise convolution (op key conv_nhwc).
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime::cuda_ops {
void register_depthwise_kernels(KernelRegistry &registry);
}  // namespace xpuruntime::cuda_ops
