// Resize (opset 11+, ONNX semantics of opset 19): attributes parsed once from a
// node, and the output shape, per-axis scales and region of interest that shape
// inference and every device's kernel derive from the inputs the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xpuruntime/ir.h"

namespace xpuruntime::ops {

struct ResizeAttrs {
  enum class Mode { kNearest, kLinear, kCubic };
  Mode mode = Mode::kNearest;
  // half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners,
  // asymmetric, tf_crop_and_resize.
  std::string coordinate_transformation_mode = "half_pixel";
  std::string nearest_mode = "round_prefer_floor";  // or round_prefer_ceil, floor, ceil
  double cubic_coeff_a = -0.75;
  bool exclude_outside = false;
  double extrapolation_value = 0.0;
  bool antialias = false;
  std::vector<int64_t> axes;                         // empty: every axis
  std::string keep_aspect_ratio_policy = "stretch";  // or not_larger, not_smaller
  // Throws InvalidModelError naming the node for an unknown mode or policy.
  static ResizeAttrs from_node(const graph::Node& n);
};

// What one Resize call computes, per axis of the input.
struct ResizeGeometry {
  graph::Shape output;
  std::vector<double> scales;  // output / input as the coordinate mapping uses it
  std::vector<double> roi;     // 2 * rank: starts then ends (tf_crop_and_resize), else empty
};

// The geometry from the input shape and the values of the roi, scales and sizes
// inputs (an absent or empty input is an empty vector). Throws
// InvalidModelError naming the node when neither or both of scales and sizes
// are given, or their lengths do not match the axes.
ResizeGeometry resize_geometry(const graph::Node& n, const ResizeAttrs& a,
                               const graph::Shape& input, const std::vector<double>& roi,
                               const std::vector<double>& scales,
                               const std::vector<int64_t>& sizes);

}  // namespace xpuruntime::ops
