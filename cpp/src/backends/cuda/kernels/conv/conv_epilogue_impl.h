// The Conv epilogue for the cases cudnnConvolutionBiasActivationForward does
// not take (no bias, or a configuration cuDNN refuses): y = relu?(y +
// bias[channel]) in place over a dense [batch, channels, inner] output. Plain
// arguments, no CUDA headers.
#pragma once

#include <cstdint>

#include "xpuruntime/dtype.h"

namespace xpuruntime::cudnn_conv {

// bias: `channels` elements of t, or nullptr. float32, float16 and bfloat16
// only.
void launch_bias_relu(DType t, void* y, const void* bias, int64_t batch, int64_t channels,
                      int64_t inner, bool relu, void* stream);

}  // namespace xpuruntime::cudnn_conv
