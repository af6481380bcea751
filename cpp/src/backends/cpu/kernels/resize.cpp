// Resize on the CPU, separably: one 1-D pass per resized axis, each output
// position a weighted sum of a few input positions (ONNX's reference computes
// the same tensor-product weights axis by axis). Weights and positions are
// computed in double once per axis and call; values are accumulated in double
// and stored in the input's float dtype.
#include "xpuruntime/ops/resize.h"

#include <cmath>
#include <vector>

#include "backends/cpu/kernels/cpu_op.h"
#include "backends/cpu/kernels/parallel.h"

namespace xpuruntime::cpu {
namespace {

using Mode = ops::ResizeAttrs::Mode;

// The weights of one output position over its `taps` neighbours (ratio in (0,
// 1]: the position's distance past the neighbour on its left, 1 on an exact
// hit).
std::vector<double> coeffs(const ops::ResizeAttrs& a, double ratio, double scale) {
  if (a.mode == Mode::kNearest) {
    if (ratio == 1.0) return {0, 1};
    const std::string& m = a.nearest_mode;
    if (m == "round_prefer_floor") return {ratio <= 0.5 ? 1.0 : 0.0, ratio > 0.5 ? 1.0 : 0.0};
    if (m == "round_prefer_ceil") return {ratio < 0.5 ? 1.0 : 0.0, ratio >= 0.5 ? 1.0 : 0.0};
    if (m == "floor") return {1, 0};
    return {0, 1};  // ceil
  }
  const double A = a.cubic_coeff_a;
  if (!a.antialias) {
    if (a.mode == Mode::kLinear) return {1 - ratio, ratio};
    const double r1 = ratio + 1, q = 1 - ratio, q1 = q + 1;
    return {((A * r1 - 5 * A) * r1 + 8 * A) * r1 - 4 * A,
            ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1, ((A + 2) * q - (A + 3)) * q * q + 1,
            ((A * q1 - 5 * A) * q1 + 8 * A) * q1 - 4 * A};
  }
  // Antialias (downsampling): the filter is stretched by 1/scale.
  const double s = std::min(scale, 1.0);
  std::vector<double> c;
  if (a.mode == Mode::kLinear) {
    const int64_t start = static_cast<int64_t>(std::floor(-1 / s) + 1);
    const int64_t footprint = 2 - 2 * start;
    for (int64_t k = 0; k < footprint; ++k)
      c.push_back(std::clamp(1 - std::abs((static_cast<double>(start + k) - ratio) * s), 0.0, 1.0));
  } else {
    const int64_t i_start = static_cast<int64_t>(std::floor(-2 / s) + 1);
    const int64_t i_end = 2 - i_start;
    for (int64_t i = i_start; i < i_end; ++i) {
      const double x = std::abs(s * (static_cast<double>(i) - ratio));
      const double x2 = x * x, x3 = x2 * x;
      c.push_back(x <= 1  ? (A + 2) * x3 - (A + 3) * x2 + 1
                  : x < 2 ? A * x3 - 5 * A * x2 + 8 * A * x - 4 * A
                          : 0.0);
    }
  }
  double sum = 0;
  for (double v : c) sum += v;
  for (double& v : c) v /= sum;
  return c;
}

// Where output position y of an axis samples the input (ONNX's coordinate
// modes).
double source_coord(const ops::ResizeAttrs& a, double y, double scale, int64_t in_w, double out_w,
                    int64_t out_w_int, const double* roi) {
  const std::string& m = a.coordinate_transformation_mode;
  if (m == "align_corners")
    return out_w == 1 ? 0.0 : y * static_cast<double>(in_w - 1) / (out_w - 1);
  if (m == "asymmetric") return y / scale;
  if (m == "tf_crop_and_resize") {
    const double x = out_w == 1
                         ? (roi[1] - roi[0]) * static_cast<double>(in_w - 1) / 2
                         : y * (roi[1] - roi[0]) * static_cast<double>(in_w - 1) / (out_w - 1);
    return x + roi[0] * static_cast<double>(in_w - 1);
  }
  if (m == "pytorch_half_pixel") return out_w == 1 ? -0.5 : (y + 0.5) / scale - 0.5;
  if (m == "half_pixel_symmetric") {
    const double adjustment = static_cast<double>(out_w_int) / out_w;
    const double offset = static_cast<double>(in_w) / 2 * (1 - adjustment);
    return offset + (y + 0.5) / scale - 0.5;
  }
  return (y + 0.5) / scale - 0.5;  // half_pixel
}

// One axis: out_w positions, each `taps` (input index, weight) pairs, and
// whether the position lies outside the input (tf_crop_and_resize's
// extrapolation).
struct AxisPlan {
  int64_t taps = 0;
  std::vector<int64_t> index;  // out_w * taps, clamped into the input
  std::vector<double> weight;  // out_w * taps
  std::vector<char> outside;   // out_w
};

AxisPlan axis_plan(const ops::ResizeAttrs& a, double scale, int64_t in_w, int64_t out_w_int,
                   const double* roi) {
  AxisPlan p;
  const double out_w = scale * static_cast<double>(in_w);
  p.outside.assign(out_w_int, 0);
  for (int64_t y = 0; y < out_w_int; ++y) {
    const double x = source_coord(a, static_cast<double>(y), scale, in_w, out_w, out_w_int, roi);
    if (roi != nullptr) p.outside[y] = x < 0 || x > static_cast<double>(in_w - 1);
    const double xf = std::floor(x);
    const double ratio = x == xf ? 1.0 : x - xf;
    std::vector<double> c = coeffs(a, ratio, scale);
    const int64_t n = static_cast<int64_t>(c.size());
    if (y == 0) p.taps = n;
    // The n neighbours closest to x, ties to the smaller index, in edge-padded
    // coordinates (as the reference's neighbour search).
    const int64_t pad = (n + 1) / 2;
    const double xp = x + static_cast<double>(pad);
    const int64_t pp = static_cast<int64_t>(std::floor(xp));
    const double frac = xp - static_cast<double>(pp);
    int64_t off;
    if (n % 2 == 0)
      off = frac == 0 ? -(n / 2) : -(n / 2) + 1;
    else
      off = frac <= 0.5 ? -((n - 1) / 2) : -((n - 1) / 2) + 1;
    const int64_t start = pp + off - pad;
    if (a.exclude_outside) {
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) {
        if (start + k < 0 || start + k >= in_w) c[k] = 0;
        sum += c[k];
      }
      if (sum == 0) sum = 1;
      for (double& v : c) v /= sum;
    }
    for (int64_t k = 0; k < n; ++k) {
      p.index.push_back(std::clamp<int64_t>(start + k, 0, in_w - 1));
      p.weight.push_back(c[k]);
    }
  }
  return p;
}

// Resizes axis `axis` of `src` (shape s) into a new buffer; s[axis] becomes
// out_w.
std::vector<double> resize_axis(const std::vector<double>& src, Shape& s, int64_t axis,
                                const AxisPlan& p, int64_t out_w, double extrapolation) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= s[i];
  for (std::size_t i = axis + 1; i < s.size(); ++i) inner *= s[i];
  const int64_t in_w = s[axis];
  std::vector<double> dst(static_cast<std::size_t>(outer * out_w * inner));
  parallel_for(outer * out_w, outer * out_w * inner * p.taps, [&](int64_t b, int64_t e) {
    for (int64_t ob = b; ob < e; ++ob) {
      const int64_t o = ob / out_w, y = ob % out_w;
      double* d = dst.data() + ob * inner;
      if (p.outside[y]) {
        for (int64_t i = 0; i < inner; ++i) d[i] = extrapolation;
        continue;
      }
      for (int64_t i = 0; i < inner; ++i) d[i] = 0;
      for (int64_t k = 0; k < p.taps; ++k) {
        const double w = p.weight[y * p.taps + k];
        const double* srow = src.data() + (o * in_w + p.index[y * p.taps + k]) * inner;
        for (int64_t i = 0; i < inner; ++i) d[i] += w * srow[i];
      }
    }
  });
  s[axis] = out_w;
  return dst;
}

std::vector<double> values(const std::vector<TensorView>& in, std::size_t i) {
  std::vector<double> v;
  if (in.size() <= i || in[i].data == nullptr) return v;
  HostTensor t = HostTensor::wrap(in[i].dtype, in[i].shape, in[i].data, nullptr);
  for (int64_t k = 0; k < t.numel(); ++k) v.push_back(t.float_at(k));
  return v;
}

void resize(const ops::ResizeAttrs& a, const Node& n, const std::vector<TensorView>& in,
            std::vector<TensorView>& out) {
  const std::vector<int64_t> sizes =
      in.size() > 3 && in[3].data ? in[3].ints() : std::vector<int64_t>{};
  const ops::ResizeGeometry g =
      ops::resize_geometry(n, a, in[0].shape, values(in, 1), values(in, 2), sizes);
  XRT_CHECK(g.output == out[0].shape, InvalidArgumentError, n.where(), ": output shape ",
            shape_str(out[0].shape), " differs from the computed ", shape_str(g.output));
  if (out[0].numel() == 0) return;
  const int64_t r = in[0].rank();
  std::vector<int64_t> axes;
  for (int64_t ax : a.axes) axes.push_back(norm_axis(n, ax, r));
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  visit_dtype(in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIsFloat<T>) {
      using N = Num<T>;
      const T* x = in[0].ptr<const T>();
      std::vector<double> buf(static_cast<std::size_t>(in[0].numel()));
      for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<double>(N::load(x[i]));
      Shape s = in[0].shape;
      for (int64_t ax : axes) {
        const double* roi = nullptr;
        double axis_roi[2] = {0.0, 1.0};
        if (!g.roi.empty()) {
          axis_roi[0] = g.roi[ax];
          axis_roi[1] = g.roi[r + ax];
          roi = axis_roi;
        }
        // An axis that keeps its size under scale 1 and the full roi is left
        // alone.
        const bool identity =
            std::abs(g.scales[ax] - 1.0) <= 1e-9 && g.output[ax] == s[ax] &&
            (roi == nullptr || (std::abs(roi[0]) <= 1e-9 && std::abs(roi[1] - 1.0) <= 1e-9));
        if (identity) continue;
        const AxisPlan p = axis_plan(a, g.scales[ax], s[ax], g.output[ax], roi);
        buf = resize_axis(buf, s, ax, p, g.output[ax], a.extrapolation_value);
      }
      T* y = out[0].ptr<T>();
      for (std::size_t i = 0; i < buf.size(); ++i)
        y[i] = N::store(static_cast<typename N::C>(buf[i]));
    }
  });
}

}  // namespace

void register_resize_ops(std::vector<OpDef>& defs) {
  OpDef d;
  d.op_type = "Resize";
  d.kernel = "cpu";
  set_parsed_body<ops::ResizeAttrs>(d, resize);
  defs.push_back(std::move(d));
}

}  // namespace xpuruntime::cpu
