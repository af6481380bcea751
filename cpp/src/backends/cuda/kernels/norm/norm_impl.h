// Plain-argument launcher of InstanceNormalization (no CUDA headers).
#pragma once

#include <cstdint>

#include "xpuruntime/dtype.h"

namespace xpuruntime::cuda_ops {

// x [batch, channels, inner...] of float dtype t (scale, bias: [channels] of
// t): per (batch, channel) row, y = (x - mean) / sqrt(var + eps) * scale +
// bias, with the biased variance. Statistics in fp32 (fp64 for fp64 inputs),
// two passes (mean, then squared deviations: no cancellation), one thread block
// per row.
void launch_instance_norm(DType t, const void* x, const void* scale, const void* bias, void* y,
                          int64_t batch, int64_t channels, int64_t inner, double eps, void* stream);

}  // namespace xpuruntime::cuda_ops
