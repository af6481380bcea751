// Conv kernel "onednn": oneDNN's convolution as one more registered CPU kernel
// (op key `conv`), chosen and recorded by the Dispatcher like cpu_direct or
// cpu_im2col; KernelPolicy(conv="onednn") pins it. See onednn_conv.cpp.
#pragma once

#include <vector>

#include "backends/cpu/kernels/cpu_op.h"

namespace xpuruntime::cpu {

// Appends the OpDef of Conv/"onednn" (registered in every build; without oneDNN its
// supports() answers backend_unavailable with the install hint).
void register_onednn_conv_ops(std::vector<OpDef>& defs);

}  // namespace xpuruntime::cpu
