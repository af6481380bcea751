// Plain-argument launchers of MaxPool / AveragePool (1-3 spatial dims, computed as
// 3-D with leading unit dims) and inference BatchNormalization. x and y are dense
// [N, C, spatial...]; one thread per output element.
#pragma once

#include <cstddef>
#include <cstdint>

#include "xpuruntime/dtype.h"

namespace xpuruntime::cuda_ops {

struct PoolGeometry {
  int64_t planes = 0;  // N * C
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  int64_t s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, pb[3] = {0, 0, 0}, pe[3] = {0, 0, 0};
};

// MaxPool: the window's largest value (the first valid one, then strictly larger
// ones, as the CPU kernel); -inf where a window holds no input. AveragePool: the
// mean over the window's input positions, or over the positions inside input plus
// pads when count_include_pad (0 where the divisor is 0).
void launch_pool(DType t, bool is_max, bool count_include_pad, const PoolGeometry& g, const void* x,
                 void* y, void* stream);

// The same pools on channels-last X [N, spatial..., C] (g.planes = N; channels = C).
// float32, float16, bfloat16.
void launch_nhwc_pool(DType t, bool is_max, bool count_include_pad, const PoolGeometry& g,
                      int64_t channels, const void* x, void* y, void* stream);

// GlobalMax/AveragePool of channels-last X [n, pixels, C] into [n, C] (a window of no
// pixels gives 0). Few images of many pixels are reduced in pixel chunks through an fp32
// `workspace` of nhwc_global_pool_workspace_bytes() (in one pass without it).
void launch_nhwc_global_pool(DType t, bool is_max, int64_t n, int64_t pixels, int64_t channels,
                             const void* x, void* y, void* workspace, std::size_t workspace_bytes,
                             void* stream);
std::size_t nhwc_global_pool_workspace_bytes(int64_t n, int64_t pixels, int64_t channels);

// y = (x - mean[c]) * scale[c] / sqrt(var[c] + eps) + bias[c] over [N, C, inner]
// (all parameters of x's dtype, fp32 math for the 16-bit floats).
void launch_batchnorm(DType t, int64_t n, int64_t c, int64_t inner, const void* x,
                      const void* scale, const void* bias, const void* mean, const void* var,
                      double eps, void* y, void* stream);

}  // namespace xpuruntime::cuda_ops
