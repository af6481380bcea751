// Plain-argument launcher of Softmax / LogSoftmax over one axis (opset 13): x and y
// are dense [outer, axis_len, inner]. Statistics (running max and sum of
// exponentials, one pass) in fp32 for fp32/fp16/bf16, fp64 for fp64.
#pragma once

#include <cstdint>

#include "xpuruntime/dtype.h"

namespace xpuruntime::cuda_ops {

void launch_softmax(DType t, bool log, int64_t outer, int64_t axis_len, int64_t inner,
                    const void* x, void* y, void* stream);

}  // namespace xpuruntime::cuda_ops
