// Helpers shared by the shape and data-movement ops: strided copies here, the
// attribute and operand rules from xpuruntime/ops/shape_rules.h.
#pragma once

#include <utility>
#include <vector>

#include "backends/cpu/kernels/cpu_op.h"
#include "xpuruntime/ops/shape_rules.h"

namespace xpuruntime::cpu {

// dst (contiguous, out_shape) = src read with element strides src_strides.
void strided_copy(const void* src, void* dst, std::size_t es, const Shape& out_shape,
                  const Shape& src_strides);

using ops::axes_input;
using ops::constant_value;
using ops::dtype_from_onnx;
using ops::pad_full;
using ops::reshape_target;
using ops::shape_range;
using ops::slice_inputs;
using ops::slice_plan;
using ops::SliceAxis;
using ops::split_sizes;
using ops::transpose_perm;

}  // namespace xpuruntime::cpu
