// Schema of Resize (segmentation heads and FPN top-down paths: nearest and
// bilinear upsampling), with the geometry its kernels share
// (xpuruntime/ops/resize.h).
#include "xpuruntime/ops/resize.h"

#include <algorithm>
#include <cmath>

#include "ops/families.h"
#include "xpuruntime/error.h"

namespace xpuruntime::ops {
namespace {

bool resize_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 1);
  const ResizeAttrs a = ResizeAttrs::from_node(n);
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!in[0].shape) return false;
  auto given = [&](std::size_t i) { return in.size() > i && in[i].present; };
  // An input whose value is unknown makes the output shape a run-time matter.
  for (std::size_t i = 1; i < in.size() && i <= 3; ++i)
    if (given(i) && !in[i].has_value()) return false;
  std::vector<double> roi, scales;
  std::vector<int64_t> sizes;
  if (given(1)) roi = in[1].floats();
  if (given(2)) scales = in[2].floats();
  if (given(3)) sizes = in[3].ints();
  out[0].shape = resize_geometry(n, a, *in[0].shape, roi, scales, sizes).output;
  return true;
}

}  // namespace

ResizeAttrs ResizeAttrs::from_node(const Node& n) {
  ResizeAttrs a;
  const std::string mode = n.attr_str("mode", "nearest");
  if (mode == "nearest")
    a.mode = Mode::kNearest;
  else if (mode == "linear")
    a.mode = Mode::kLinear;
  else if (mode == "cubic")
    a.mode = Mode::kCubic;
  else
    XRT_THROW(InvalidModelError, n.where(), ": unknown mode '", mode, "' (nearest, linear, cubic)");
  a.coordinate_transformation_mode = n.attr_str("coordinate_transformation_mode", "half_pixel");
  const std::string& c = a.coordinate_transformation_mode;
  XRT_CHECK(c == "half_pixel" || c == "half_pixel_symmetric" || c == "pytorch_half_pixel" ||
                c == "align_corners" || c == "asymmetric" || c == "tf_crop_and_resize",
            InvalidModelError, n.where(), ": unknown coordinate_transformation_mode '", c, "'");
  a.nearest_mode = n.attr_str("nearest_mode", "round_prefer_floor");
  const std::string& nm = a.nearest_mode;
  XRT_CHECK(
      nm == "round_prefer_floor" || nm == "round_prefer_ceil" || nm == "floor" || nm == "ceil",
      InvalidModelError, n.where(), ": unknown nearest_mode '", nm, "'");
  a.cubic_coeff_a = n.attr_float("cubic_coeff_a", -0.75);
  a.exclude_outside = n.attr_int("exclude_outside", 0) != 0;
  a.extrapolation_value = n.attr_float("extrapolation_value", 0.0);
  a.antialias = n.attr_int("antialias", 0) != 0;
  XRT_CHECK(!(a.antialias && a.mode == Mode::kNearest), InvalidModelError, n.where(),
            ": antialias applies to linear and cubic modes only");
  a.axes = n.attr_ints("axes", {});
  a.keep_aspect_ratio_policy = n.attr_str("keep_aspect_ratio_policy", "stretch");
  const std::string& k = a.keep_aspect_ratio_policy;
  XRT_CHECK(k == "stretch" || k == "not_larger" || k == "not_smaller", InvalidModelError, n.where(),
            ": unknown keep_aspect_ratio_policy '", k, "'");
  return a;
}

ResizeGeometry resize_geometry(const Node& n, const ResizeAttrs& a, const Shape& input,
                               const std::vector<double>& roi, const std::vector<double>& scales,
                               const std::vector<int64_t>& sizes) {
  const int64_t r = static_cast<int64_t>(input.size());
  std::vector<int64_t> axes;
  for (int64_t ax : a.axes) axes.push_back(norm_axis(n, ax, r));
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  const std::size_t na = axes.size();
  XRT_CHECK(scales.empty() != sizes.empty(), InvalidModelError, n.where(),
            ": exactly one of scales (input 2) and sizes (input 3) must be given");
  XRT_CHECK((scales.empty() || scales.size() == na) && (sizes.empty() || sizes.size() == na),
            InvalidModelError, n.where(), ": scales/sizes have ",
            std::max(scales.size(), sizes.size()), " values but Resize works on ", na, " axes");
  ResizeGeometry g;
  g.output = input;
  g.scales.assign(r, 1.0);
  if (!scales.empty()) {
    for (std::size_t i = 0; i < na; ++i) {
      XRT_CHECK(scales[i] > 0, InvalidModelError, n.where(), ": scale ", scales[i],
                " must be positive");
      g.scales[axes[i]] = scales[i];
      g.output[axes[i]] = static_cast<int64_t>(scales[i] * static_cast<double>(input[axes[i]]));
    }
  } else {
    for (std::size_t i = 0; i < na; ++i) {
      XRT_CHECK(sizes[i] >= 0, InvalidModelError, n.where(), ": size ", sizes[i],
                " must not be negative");
      XRT_CHECK(input[axes[i]] > 0, InvalidModelError, n.where(), ": cannot resize axis ", axes[i],
                " of size 0 to ", sizes[i]);
      g.scales[axes[i]] = static_cast<double>(sizes[i]) / static_cast<double>(input[axes[i]]);
      g.output[axes[i]] = sizes[i];
    }
    if (a.keep_aspect_ratio_policy != "stretch") {
      double s = g.scales[axes[0]];
      for (int64_t ax : axes)
        s = a.keep_aspect_ratio_policy == "not_larger" ? std::min(s, g.scales[ax])
                                                       : std::max(s, g.scales[ax]);
      for (int64_t ax : axes) {
        g.scales[ax] = s;
        g.output[ax] = static_cast<int64_t>(s * static_cast<double>(input[ax]) + 0.5);
      }
    }
  }
  if (a.coordinate_transformation_mode == "tf_crop_and_resize") {
    XRT_CHECK(roi.size() == 2 * na, InvalidModelError, n.where(),
              ": tf_crop_and_resize needs roi (input 1) with 2 x ", na, " values, got ",
              roi.size());
    g.roi.assign(2 * r, 0.0);
    for (int64_t i = 0; i < r; ++i) g.roi[r + i] = 1.0;
    for (std::size_t i = 0; i < na; ++i) {
      g.roi[axes[i]] = roi[i];
      g.roi[r + axes[i]] = roi[na + i];
    }
  }
  return g;
}

void register_resize_schemas(std::vector<OpSchema>& s) {
  s.push_back(make_schema("Resize", kFloatTypes,
                          "Resize (nearest, linear, cubic; every coordinate mode, antialias, axes, "
                          "keep_aspect_ratio_policy)",
                          resize_infer));
}

}  // namespace xpuruntime::ops
