// Plain-argument launchers of InstanceNormalization and RMSNormalization (no CUDA
// headers).
#pragma once

#include <cstddef>
#include <cstdint>

#include "xpuruntime/dtype.h"

namespace xpuruntime::cuda_ops {

// x [batch, channels, inner...] of float dtype t (scale, bias: [channels] of
// t): per (batch, channel) row, y = (x - mean) / sqrt(var + eps) * scale +
// bias, with the biased variance. Statistics in fp32 (fp64 for fp64 inputs),
// two passes (mean, then squared deviations: no cancellation), one thread block
// per row; few long rows are split into chunks through `workspace` (fp32, fp64 for
// fp64) when it holds instance_norm_workspace_bytes() (one block per row otherwise).
void launch_instance_norm(DType t, const void* x, const void* scale, const void* bias, void* y,
                          int64_t batch, int64_t channels, int64_t inner, double eps,
                          void* workspace, std::size_t workspace_bytes, void* stream);

// Workspace bytes launch_instance_norm uses to split rows of `inner` values into chunks
// (0 where one block per row is used).
std::size_t instance_norm_workspace_bytes(DType t, int64_t rows, int64_t inner);

// RMSNormalization over rows of `len` elements of float dtype t: y = x /
// sqrt(mean(x^2) + eps) * scale[i % scale_len] (scale of t). fp32 statistics.
void launch_rms_norm(DType t, const void* x, const void* scale, void* y, int64_t rows, int64_t len,
                     int64_t scale_len, double eps, void* stream);

}  // namespace xpuruntime::cuda_ops
