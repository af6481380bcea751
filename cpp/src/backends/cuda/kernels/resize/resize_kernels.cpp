// Registry kernel of Resize (segmentation heads, FPN top-down paths): nearest and
// linear modes, every coordinate transformation and nearest mode, axes,
// keep_aspect_ratio_policy, exclude_outside, tf_crop_and_resize's extrapolation;
// float dtypes. Not here (supports() refuses, the CPU kernel runs them): cubic,
// and antialiased linear downsampling. The geometry (output shape, scales, roi)
// comes from ops::resize_geometry, shared with the CPU kernel and shape inference;
// roi, scales and sizes are read once when they are plan constants, else copied
// from the device per run.
#include "backends/cuda/kernels/resize/resize_kernels.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <optional>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common/op_kernel.h"
#include "backends/cuda/kernels/common/shape_cache.h"
#include "backends/cuda/kernels/resize/resize_impl.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/resize.h"

namespace xpuruntime::cuda_ops {
namespace {

using Mode = ops::ResizeAttrs::Mode;

ResizeCoord coord_of(const std::string& m) {
  if (m == "half_pixel_symmetric") return ResizeCoord::kHalfPixelSymmetric;
  if (m == "pytorch_half_pixel") return ResizeCoord::kPytorchHalfPixel;
  if (m == "align_corners") return ResizeCoord::kAlignCorners;
  if (m == "asymmetric") return ResizeCoord::kAsymmetric;
  if (m == "tf_crop_and_resize") return ResizeCoord::kTfCropAndResize;
  return ResizeCoord::kHalfPixel;  // ResizeAttrs::from_node accepts nothing else
}

ResizeNearest nearest_of(const std::string& m) {
  if (m == "round_prefer_ceil") return ResizeNearest::kRoundPreferCeil;
  if (m == "floor") return ResizeNearest::kFloor;
  if (m == "ceil") return ResizeNearest::kCeil;
  return ResizeNearest::kRoundPreferFloor;
}

// A float input's values: from the plan constant, else read from the device (a
// synchronizing copy, refused inside a CUDA graph capture); empty when absent.
class FloatsInput {
 public:
  FloatsInput(const PrepareContext& pc, std::size_t index, const char* role)
      : index_(index), present_(has_input(pc, index)), what_(where(pc)), role_(role) {
    if (const graph::HostTensor* t = constant_input(pc, index)) {
      std::vector<double> v;
      for (int64_t i = 0; i < t->numel(); ++i) v.push_back(t->float_at(i));
      constant_ = std::move(v);
    }
  }
  bool constant() const { return !present_ || constant_.has_value(); }
  std::vector<double> get(const KernelArgs& a) const {
    if (!present_) return {};
    if (constant_) return *constant_;
    const TensorArg& t = a.inputs.at(index_);
    if (!t.present() || t.numel() == 0) return {};
    const cudaStream_t s = static_cast<cudaStream_t>(a.stream);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    XRT_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
    XRT_CHECK(capture == cudaStreamCaptureStatusNone, UnsupportedOperationError, what_, ": ", role_,
              " (input ", index_,
              ") is computed at run time and must be read on the host, which a CUDA graph "
              "capture forbids; make it a constant of the model or run without cuda_graph");
    std::vector<unsigned char> bytes(t.nbytes());
    XRT_CUDA_CHECK(cudaMemcpyAsync(bytes.data(), t.data, bytes.size(), cudaMemcpyDeviceToHost, s));
    XRT_CUDA_CHECK(cudaStreamSynchronize(s));
    const graph::HostTensor h = graph::HostTensor::wrap(t.dtype, t.shape, bytes.data(), nullptr);
    std::vector<double> v;
    for (int64_t i = 0; i < h.numel(); ++i) v.push_back(h.float_at(i));
    return v;
  }

 private:
  std::size_t index_;
  bool present_;
  std::optional<std::vector<double>> constant_;
  std::string what_, role_;
};

ResizeParams resize_params(const graph::Node& node, const ops::ResizeAttrs& a, const Shape& in,
                           const Shape& out, const std::vector<double>& roi,
                           const std::vector<double>& scales, const std::vector<int64_t>& sizes,
                           const std::string& what) {
  const ops::ResizeGeometry g = ops::resize_geometry(node, a, in, roi, scales, sizes);
  XRT_CHECK(g.output == out, InvalidArgumentError, what, ": output shape ", graph::shape_str(out),
            " differs from the computed ", graph::shape_str(g.output));
  const int64_t r = static_cast<int64_t>(in.size());
  XRT_CHECK(r <= kMaxResizeRank, UnsupportedOperationError, what, ": rank ", r,
            " is above the CUDA kernel's ", kMaxResizeRank);
  ResizeParams p;
  p.rank = static_cast<int>(r);
  p.linear = a.mode == Mode::kLinear;
  p.coord = coord_of(a.coordinate_transformation_mode);
  p.nearest = nearest_of(a.nearest_mode);
  p.exclude_outside = a.exclude_outside;
  p.has_roi = !g.roi.empty();
  p.extrapolation = a.extrapolation_value;
  p.numel = graph::shape_numel(out);
  std::vector<bool> listed(static_cast<std::size_t>(r), a.axes.empty());
  for (int64_t ax : a.axes) {
    const int64_t d = ax < 0 ? ax + r : ax;
    XRT_CHECK(d >= 0 && d < r, InvalidModelError, what, ": axis ", ax, " is out of range for rank ",
              r);
    listed[static_cast<std::size_t>(d)] = true;
  }
  for (int64_t d = 0; d < r; ++d) {
    const std::size_t k = static_cast<std::size_t>(d);
    p.in_dims[d] = in[k];
    p.out_dims[d] = out[k];
    p.scales[d] = g.scales[k];
    p.roi_start[d] = p.has_roi ? g.roi[k] : 0.0;
    p.roi_end[d] = p.has_roi ? g.roi[k + static_cast<std::size_t>(r)] : 1.0;
    // As the CPU kernel: an axis that keeps its size under scale 1 (and the full
    // roi) is left alone.
    const bool identity =
        std::abs(g.scales[k] - 1.0) <= 1e-9 && out[k] == in[k] &&
        (!p.has_roi || (std::abs(p.roi_start[d]) <= 1e-9 && std::abs(p.roi_end[d] - 1.0) <= 1e-9));
    p.resized[d] = listed[k] && !identity;
  }
  return p;
}

Support resize_supports(const OpContext& ctx) {
  Support s = first_refusal(
      {require_arity(ctx, 1), require_dense(ctx), require_dtype(ctx, 0, kFloatTypes, "X")});
  if (!s.ok) return s;
  auto attr = [&](const char* k, const char* fallback) {
    const auto it = ctx.attrs.find(k);
    return it == ctx.attrs.end() ? std::string(fallback) : it->second;
  };
  const std::string mode = attr("mode", "nearest");
  if (mode == "cubic")
    return Support::no(reason::kAttributeUnsupported,
                       "cubic Resize has no CUDA kernel (nearest and linear do)");
  const Shape& in = ctx.inputs[0].shape;
  if (in.size() > static_cast<std::size_t>(kMaxResizeRank))
    return Support::no(reason::kShapeUnsupported, "rank above " + std::to_string(kMaxResizeRank));
  // Antialiasing widens the linear filter only where an axis shrinks (an output
  // dimension below its input's: scale < 1); upsampling is plain linear.
  if (mode == "linear" && attr("antialias", "0") != "0" && !ctx.outputs.empty()) {
    const Shape& out = ctx.outputs[0].shape;
    for (std::size_t d = 0; d < in.size() && d < out.size(); ++d)
      if (out[d] < in[d])
        return Support::no(reason::kAttributeUnsupported,
                           "antialiased linear downsampling has no CUDA kernel");
  }
  return Support::yes();
}

void add_resize(KernelRegistry& r) {
  // int64 for the `sizes` input: the registry's dtype check reads every input; X's
  // float types are resize_supports()'s check.
  static const std::vector<DType> kResizeTypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                                                  DType::kFloat64, DType::kInt64};
  add_kernel(
      r, "resize", kResizeTypes,
      "Resize, nearest and linear (every coordinate transformation and nearest mode, axes, "
      "tf_crop_and_resize; fp64 sums); not cubic or antialiased downsampling",
      resize_supports, [](const PrepareContext& pc) {
        const ops::ResizeAttrs attrs = ops::ResizeAttrs::from_node(*pc.node);
        const std::string what = where(pc);
        const graph::Node node = *pc.node;
        const FloatsInput roi(pc, 1, "roi"), scales(pc, 2, "scales");
        const IntsInput sizes(pc, 3, "sizes");
        auto make = [node, attrs, roi, scales, sizes, what](const KernelArgs& a, const Shape& in,
                                                            const Shape& out) {
          return resize_params(node, attrs, in, out, roi.get(a), scales.get(a), sizes.get(a), what);
        };
        if (roi.constant() && scales.constant() && (!sizes.present() || sizes.constant())) {
          ShapeCached<ResizeParams> plan(
              {pc.ctx->inputs[0].shape, pc.ctx->outputs[0].shape},
              [make](const std::vector<Shape>& s) { return make(KernelArgs{}, s[0], s[1]); });
          return make_prepared([plan](const KernelArgs& a) {
            const ResizeParams p = plan.get({a.inputs[0].shape, a.outputs[0].shape});
            launch_resize(a.inputs[0].dtype, p, a.inputs[0].data, a.outputs[0].data, a.stream);
          });
        }
        return make_prepared([make](const KernelArgs& a) {
          const ResizeParams p = make(a, a.inputs[0].shape, a.outputs[0].shape);
          launch_resize(a.inputs[0].dtype, p, a.inputs[0].data, a.outputs[0].data, a.stream);
        });
      });
}

}  // namespace

void register_resize_kernels(KernelRegistry& registry) { add_resize(registry); }

}  // namespace xpuruntime::cuda_ops
