// Plain-argument launcher of Resize, nearest and linear modes (no CUDA headers).
#pragma once

#include <cstdint>

#include "xpuruntime/dtype.h"

namespace xpuruntime::cuda_ops {

inline constexpr int kMaxResizeRank = 8;

// ONNX's coordinate_transformation_mode and nearest_mode values.
enum class ResizeCoord : int32_t {
  kHalfPixel,
  kHalfPixelSymmetric,
  kPytorchHalfPixel,
  kAlignCorners,
  kAsymmetric,
  kTfCropAndResize
};
enum class ResizeNearest : int32_t { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil };

// One Resize call: per axis the input and output sizes, the scale the coordinate
// mapping uses, the region of interest (tf_crop_and_resize) and whether the axis
// is resampled at all (an axis resized onto itself is copied, as on the CPU).
struct ResizeParams {
  int rank = 0;
  bool linear = false;  // else nearest
  ResizeCoord coord = ResizeCoord::kHalfPixel;
  ResizeNearest nearest = ResizeNearest::kRoundPreferFloor;
  bool exclude_outside = false;
  bool has_roi = false;  // positions outside the roi's input range take `extrapolation`
  double extrapolation = 0.0;
  int64_t numel = 0;  // output elements
  int64_t in_dims[kMaxResizeRank] = {};
  int64_t out_dims[kMaxResizeRank] = {};
  double scales[kMaxResizeRank] = {};
  double roi_start[kMaxResizeRank] = {};
  double roi_end[kMaxResizeRank] = {};
  bool resized[kMaxResizeRank] = {};
};

// y (p.out_dims) from x (p.in_dims) of float dtype t: each output element the
// tensor product of two taps per resampled axis (positions and weights as the
// CPU kernel's separable passes), accumulated in fp64, stored in t.
void launch_resize(DType t, const ResizeParams& p, const void* x, void* y, void* stream);

}  // namespace xpuruntime::cuda_ops
