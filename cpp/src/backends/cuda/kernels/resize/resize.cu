// Resize, nearest and linear: one thread per output element computes, per
// resampled axis, where it samples the input (ONNX's coordinate modes), the two
// neighbours and their weights, then sums the tensor product of those taps.
// The positions and weights follow the CPU kernel's (backends/cpu/kernels/resize.cpp)
// so both devices give the same values up to the order of the fp64 sums.
#include <cmath>

#include "backends/cuda/kernels/common/device_types.cuh"
#include "backends/cuda/kernels/resize/resize_impl.h"

namespace xpuruntime::cuda_ops {
namespace {

// Where output position y of axis d samples the input.
__device__ double source_coord(const ResizeParams& p, int d, double y) {
  const double scale = p.scales[d];
  const double in_w = static_cast<double>(p.in_dims[d]);
  const double out_w = scale * in_w;  // the real-valued output length
  switch (p.coord) {
    case ResizeCoord::kAlignCorners:
      return out_w == 1 ? 0.0 : y * (in_w - 1) / (out_w - 1);
    case ResizeCoord::kAsymmetric:
      return y / scale;
    case ResizeCoord::kTfCropAndResize: {
      const double r0 = p.roi_start[d], r1 = p.roi_end[d];
      const double x =
          out_w == 1 ? (r1 - r0) * (in_w - 1) / 2 : y * (r1 - r0) * (in_w - 1) / (out_w - 1);
      return x + r0 * (in_w - 1);
    }
    case ResizeCoord::kPytorchHalfPixel:
      return out_w == 1 ? -0.5 : (y + 0.5) / scale - 0.5;
    case ResizeCoord::kHalfPixelSymmetric: {
      const double adjustment = static_cast<double>(p.out_dims[d]) / out_w;
      const double offset = in_w / 2 * (1 - adjustment);
      return offset + (y + 0.5) / scale - 0.5;
    }
    case ResizeCoord::kHalfPixel:
    default:
      return (y + 0.5) / scale - 0.5;
  }
}

struct Taps {
  int64_t index[2];
  double weight[2];
};

// The two neighbours of output position y on axis d (clamped into the input)
// and their weights; false when the position lies outside the roi.
__device__ bool axis_taps(const ResizeParams& p, int d, int64_t y, Taps& t) {
  const double x = source_coord(p, d, static_cast<double>(y));
  const int64_t in_w = p.in_dims[d];
  if (p.has_roi && (x < 0 || x > static_cast<double>(in_w - 1))) return false;
  const double xf = floor(x);
  // An exact hit samples x itself as the second of the pair (weights 0, 1).
  const bool exact = x == xf;
  const double ratio = exact ? 1.0 : x - xf;
  const int64_t start = static_cast<int64_t>(xf) - (exact ? 1 : 0);
  double c0, c1;
  if (p.linear) {
    c0 = 1 - ratio;
    c1 = ratio;
  } else if (exact) {
    c0 = 0;
    c1 = 1;
  } else {
    switch (p.nearest) {
      case ResizeNearest::kRoundPreferFloor:
        c0 = ratio <= 0.5 ? 1 : 0;
        break;
      case ResizeNearest::kRoundPreferCeil:
        c0 = ratio < 0.5 ? 1 : 0;
        break;
      case ResizeNearest::kFloor:
        c0 = 1;
        break;
      case ResizeNearest::kCeil:
      default:
        c0 = 0;
        break;
    }
    c1 = 1 - c0;
  }
  if (p.exclude_outside) {
    if (start < 0 || start >= in_w) c0 = 0;
    if (start + 1 < 0 || start + 1 >= in_w) c1 = 0;
    double sum = c0 + c1;
    if (sum == 0) sum = 1;
    c0 /= sum;
    c1 /= sum;
  }
  t.index[0] = min(max(start, int64_t(0)), in_w - 1);
  t.index[1] = min(max(start + 1, int64_t(0)), in_w - 1);
  t.weight[0] = c0;
  t.weight[1] = c1;
  return true;
}

template <typename T>
__global__ void resize_kernel(const T* __restrict__ x, T* __restrict__ y, ResizeParams p) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.numel;
       i += stride) {
    Taps taps[kMaxResizeRank];
    int k = 0;
    int64_t base = 0, in_stride = 1, r = i;
    int64_t tap_stride[kMaxResizeRank];
    bool inside = true;
    for (int d = p.rank - 1; d >= 0; --d) {
      const int64_t c = r % p.out_dims[d];
      r /= p.out_dims[d];
      if (p.resized[d]) {
        inside = inside && axis_taps(p, d, c, taps[k]);
        tap_stride[k] = in_stride;
        ++k;
      } else {
        base += c * in_stride;
      }
      in_stride *= p.in_dims[d];
    }
    if (!inside) {
      y[i] = store<T>(p.extrapolation);
      continue;
    }
    double acc = 0;
    for (int mask = 0; mask < (1 << k); ++mask) {
      double w = 1;
      int64_t off = base;
      for (int j = 0; j < k; ++j) {
        const int b = (mask >> j) & 1;
        w *= taps[j].weight[b];
        off += taps[j].index[b] * tap_stride[j];
      }
      // Nearest selects one tap; linear sums both even at weight 0, as the CPU
      // kernel does (a non-finite neighbour then shows, as in ONNX's reference).
      if (!p.linear && w == 0) continue;
      acc += w * static_cast<double>(load(x[off]));
    }
    y[i] = store<T>(acc);
  }
}

}  // namespace

void launch_resize(DType t, const ResizeParams& p, const void* x, void* y, void* stream) {
  if (p.numel <= 0) return;
  visit_dtype<TypeSet::kFloat>(t, "Resize", [&](auto tag) {
    using T = typename decltype(tag)::type;
    resize_kernel<T><<<grid_for(p.numel, 256), 256, 0, as_stream(stream)>>>(
        static_cast<const T*>(x), static_cast<T*>(y), p);
    XRT_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace xpuruntime::cuda_ops
