// Attribute and operand rules of the shape, data-movement and reduction ops that
// both shape inference (the schemas) and every device's kernels follow: reshape
// targets, Shape's range, Transpose's permutation, Slice plans, Split sizes, Pad
// amounts, Constant values, reduction axes. Device-neutral; each throws
// InvalidModelError naming the node for a malformed one.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "xpuruntime/ops/op_schema.h"
#include "xpuruntime/ops/reduce.h"

namespace xpuruntime::ops {

// Reshape's output shape for `spec` (0 copies a dimension unless allowzero, one -1).
Shape reshape_target(const Node& n, const Shape& in, const std::vector<int64_t>& spec);
// Shape's [start, end) after clamping (opset 15 attributes).
std::pair<int64_t, int64_t> shape_range(const Node& n, int64_t rank);
// Transpose's permutation (default: reversed), validated.
std::vector<int64_t> transpose_perm(const Node& n, int64_t rank);
// ONNX TensorProto element type -> DType; UnsupportedOperationError otherwise.
DType dtype_from_onnx(int64_t code, const Node& n);
// Pads for every axis ([begin..., end...], 2*rank) from pads over `axes`.
std::vector<int64_t> pad_full(const Node& n, const std::vector<int64_t>& pads,
                              std::vector<int64_t> axes, int64_t rank);
// The tensor a Constant node produces.
graph::HostTensor constant_value(const Node& n);
// Squeeze/Unsqueeze axes: input 1 (opset >= 13) or the attribute; known = false
// when they come from an input whose value is not known yet.
std::vector<int64_t> axes_input(const Node& n, const std::vector<Meta>& in, bool& known);

struct SliceAxis {
  int64_t start = 0, step = 1, count = 0;
};
// Per-dimension start/step/count of a Slice, numpy clamping rules.
std::vector<SliceAxis> slice_plan(const Node& n, const Shape& s, const std::vector<int64_t>& starts,
                                  const std::vector<int64_t>& ends, std::vector<int64_t> axes,
                                  std::vector<int64_t> steps);
// Slice's starts/ends/axes/steps from inputs (opset >= 10) or attributes; false when
// an input value is not known yet.
bool slice_inputs(const Node& n, const std::vector<Meta>& in, std::vector<int64_t>& st,
                  std::vector<int64_t>& en, std::vector<int64_t>& ax, std::vector<int64_t>& sp);
// Split's output sizes along an axis of `dim` elements; known = false when they come
// from an input whose value is not known yet.
std::vector<int64_t> split_sizes(const Node& n, const std::vector<Meta>& in, int64_t dim,
                                 std::size_t outputs, bool& known);

// Axes a Reduce* node reduces (sorted, unique, non-negative): input 1 when present,
// else the attribute; noop: none at all (noop_with_empty_axes). Returns false when
// the axes come from an input whose value is not known yet.
bool reduce_axes(const ReduceAttrs& a, const std::vector<Meta>& in, int64_t rank,
                 std::vector<int64_t>& axes, bool& noop);
// The shape after reducing `axes` (kept as 1 with keepdims).
Shape reduced_shape(const Shape& s, const std::vector<int64_t>& axes, bool keep);

}  // namespace xpuruntime::ops
