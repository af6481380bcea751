// Window geometry of Conv and pooling (see xpuruntime/ops/spatial.h).
#include "xpuruntime/ops/spatial.h"

#include <algorithm>
#include <string>

#include "xpuruntime/checked.h"
#include "xpuruntime/error.h"

namespace xpuruntime::ops {

using graph::Node;
using graph::Shape;

WindowAttrs WindowAttrs::from_node(const Node& n) {
  WindowAttrs a;
  a.where = n.where();
  a.kernel_shape = n.attr_ints("kernel_shape", {});
  a.strides = n.attr_ints("strides", {});
  a.dilations = n.attr_ints("dilations", {});
  a.pads = n.attr_ints("pads", {});
  a.auto_pad = n.attr_str("auto_pad", "NOTSET");
  a.ceil_mode = n.attr_int("ceil_mode", 0) != 0;
  XRT_CHECK(a.auto_pad == "NOTSET" || a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER" ||
                a.auto_pad == "VALID",
            InvalidModelError, a.where, ": unknown auto_pad '", a.auto_pad,
            "' (NOTSET, SAME_UPPER, SAME_LOWER, VALID)");
  return a;
}

ConvAttrs ConvAttrs::from_node(const Node& n) {
  ConvAttrs a;
  a.window = WindowAttrs::from_node(n);
  a.window.ceil_mode = false;  // not a Conv attribute
  a.group = n.attr_int("group", 1);
  return a;
}

PoolAttrs PoolAttrs::from_node(const Node& n) {
  PoolAttrs a;
  a.window = WindowAttrs::from_node(n);
  XRT_CHECK(!a.window.kernel_shape.empty(), InvalidModelError, a.window.where,
            ": kernel_shape attribute is required");
  a.count_include_pad = n.attr_int("count_include_pad", 0) != 0;
  a.column_major_indices = n.attr_int("storage_order", 0) != 0;
  return a;
}

namespace {

// A window that does not fit the padded input would give an empty output (ONNX
// Runtime refuses it too): an error naming the node, not a silently empty tensor.
void require_window_fits(const WindowAttrs& a, std::size_t dim, int64_t in, int64_t pb, int64_t pe,
                         int64_t k, int64_t d, int64_t extent) {
  XRT_CHECK(
      extent <= in + pb + pe, InvalidModelError, a.where, ": the kernel (size ", k,
      d > 1 ? ", dilation " + std::to_string(d) + ": extent " + std::to_string(extent)
            : std::string(),
      ") is larger than the padded input in spatial dimension ", dim, " (size ", in,
      pb + pe > 0 ? ", pads " + std::to_string(pb) + " + " + std::to_string(pe) : std::string(),
      "); the output would be empty: use a smaller kernel or dilation, pad the input, or "
      "check the input shape");
}

}  // namespace

Spatial make_spatial(const WindowAttrs& a, const Shape& in, const std::vector<int64_t>& kernel) {
  const std::string& where = a.where;
  const bool ceil_mode = a.ceil_mode;
  XRT_CHECK(in.size() >= 3 && in.size() <= 5, UnsupportedOperationError, where, ": input rank ",
            in.size(), " is not supported (1 to 3 spatial dimensions)");
  Spatial g;
  const std::size_t r = in.size() - 2;
  XRT_CHECK(kernel.size() == r, InvalidModelError, where, ": kernel has ", kernel.size(),
            " dimensions but the input has ", r, " spatial dimensions");
  g.in.assign(in.begin() + 2, in.end());
  g.k = kernel;
  g.s = a.strides.empty() ? std::vector<int64_t>(r, 1) : a.strides;
  g.d = a.dilations.empty() ? std::vector<int64_t>(r, 1) : a.dilations;
  const std::vector<int64_t> pads = a.pads.empty() ? std::vector<int64_t>(2 * r, 0) : a.pads;
  XRT_CHECK(g.s.size() == r && g.d.size() == r && pads.size() == 2 * r, InvalidModelError, where,
            ": strides/dilations/pads lengths do not match ", r, " spatial dimensions");
  const std::string& auto_pad = a.auto_pad;
  g.out.resize(r);
  g.pb.resize(r);
  g.pe.resize(r);
  for (std::size_t i = 0; i < r; ++i) {
    XRT_CHECK(g.k[i] > 0 && g.s[i] > 0 && g.d[i] > 0, InvalidModelError, where,
              ": kernel, strides and dilations must be positive (spatial dimension ", i,
              ": kernel ", g.k[i], ", stride ", g.s[i], ", dilation ", g.d[i], ")");
    XRT_CHECK(g.in[i] >= 0, InvalidModelError, where, ": input dimension ", i + 2, " is ", g.in[i]);
    // Extent of the dilated kernel, (k - 1) * d + 1, without wrapping.
    const int64_t ek = checked_add<InvalidModelError>(
        checked_mul<InvalidModelError>(g.k[i] - 1, g.d[i], where + ": dilated kernel extent"),
        int64_t{1}, where + ": dilated kernel extent");
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      g.out[i] = g.in[i] / g.s[i] + (g.in[i] % g.s[i] != 0);  // ceil, without wrapping
      // (out - 1) * s <= in, so this cannot wrap either.
      int64_t total = std::max<int64_t>(0, (g.out[i] - 1) * g.s[i] - g.in[i] + ek);
      g.pb[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      g.pe[i] = total - g.pb[i];
    } else if (auto_pad == "VALID") {
      g.pb[i] = g.pe[i] = 0;
      int64_t span = g.in[i] - ek;
      require_window_fits(a, i, g.in[i], 0, 0, g.k[i], g.d[i], ek);
      g.out[i] = (ceil_mode ? span / g.s[i] + (span % g.s[i] != 0) : span / g.s[i]) + 1;
      // As NOTSET's: the last window must start inside the input (ONNX Runtime's rule).
      if (ceil_mode && (g.out[i] - 1) * g.s[i] >= g.in[i]) --g.out[i];
    } else {
      XRT_CHECK(auto_pad == "NOTSET", InvalidModelError, where, ": unknown auto_pad '",
                auto_pad, "' (NOTSET, SAME_UPPER, SAME_LOWER, VALID)");
      g.pb[i] = pads[i];
      g.pe[i] = pads[i + r];
      XRT_CHECK(g.pb[i] >= 0 && g.pe[i] >= 0, InvalidModelError, where, ": negative pads (",
                g.pb[i], ", ", g.pe[i], ") in spatial dimension ", i);
      const int64_t padded = checked_add<InvalidModelError>(
          g.in[i], checked_add<InvalidModelError>(g.pb[i], g.pe[i], where + ": pads"),
          where + ": padded input size");
      require_window_fits(a, i, g.in[i], g.pb[i], g.pe[i], g.k[i], g.d[i], ek);
      const int64_t span = padded - ek;
      if (ceil_mode) {
        g.out[i] = span / g.s[i] + (span % g.s[i] != 0) + 1;
        // The last window must start inside the input or its leading pad.
        if ((g.out[i] - 1) * g.s[i] >= g.in[i] + g.pb[i]) --g.out[i];
      } else {
        g.out[i] = span / g.s[i] + 1;
      }
    }
    XRT_CHECK(g.out[i] > 0, InvalidModelError, where, ": spatial dimension ", i,
              " of the output would be empty (input size ", g.in[i], "); check the input shape");
  }
  return g;
}

Spatial conv_geometry(const ConvAttrs& a, const Shape& x, const Shape& w) {
  // The kernels walk W's own taps: a kernel_shape attribute must agree with them.
  XRT_CHECK(w.size() >= 2, InvalidModelError, a.window.where, ": W ", graph::shape_str(w),
            " must have rank >= 3");
  const std::vector<int64_t> k(w.begin() + 2, w.end());
  XRT_CHECK(a.window.kernel_shape.empty() || a.window.kernel_shape == k, InvalidModelError,
            a.window.where, ": kernel_shape ", graph::shape_str(a.window.kernel_shape),
            " does not match the weights' spatial dimensions ", graph::shape_str(k), " (W is ",
            graph::shape_str(w), "); drop the attribute or fix the weights");
  return make_spatial(a.window, x, k);
}

Spatial pool_geometry(const PoolAttrs& a, const Shape& in) {
  return make_spatial(a.window, in, a.window.kernel_shape);
}

}  // namespace xpuruntime::ops
