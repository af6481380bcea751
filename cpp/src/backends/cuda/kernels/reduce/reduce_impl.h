// Plain-argument launchers of the reductions and CumSum. Input x is dense
// [outer, reduce, inner] (the reduced axes are adjacent after collapsing; the
// registry kernel transposes other cases into its workspace first); y is dense
// [outer, inner]. Accumulation: fp32 for fp32/fp16/bf16, fp64 for fp64, int64 for
// integers (fp64 for L2 and LogSumExp of integers).
#pragma once

#include <cstdint>

#include "xpuruntime/dtype.h"

namespace xpuruntime::cuda_ops {

enum class ReduceOp : int32_t { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSumExp, kSumSquare };

void launch_reduce(ReduceOp op, DType t, int64_t outer, int64_t reduce, int64_t inner,
                   const void* x, void* y, void* stream);

// y = cumulative sum of x along the middle axis of [outer, len, inner]
// (exclusive: the element itself left out; reverse: from the end).
void launch_cumsum(DType t, int64_t outer, int64_t len, int64_t inner, bool exclusive, bool reverse,
                   const void* x, void* y, void* stream);

}  // namespace xpuruntime::cuda_ops
