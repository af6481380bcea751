// RotaryHalf (y = x * cos + rotate_half(x) * sin): plain arguments, no CUDA
// headers.
#pragma once

#include <cstdint>

#include "backends/cuda/kernels/common/broadcast.h"
#include "xpuruntime/dtype.h"

namespace xpuruntime::cuda_ops {

// x dense with last dimension d (even); ix: the broadcast of (x, cos, sin) onto
// x's shape (operands 1 and 2 are cos and sin). float32, float16, bfloat16;
// fp32 math.
void launch_rotary_half(DType t, const StridedIndex &ix, int64_t d, const void *x, const void *cos,
                        const void *sin, void *y, void *stream);

}  // namespace xpuruntime::cuda_ops
