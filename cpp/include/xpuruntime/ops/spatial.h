// Window geometry shared by convolution and pooling (device-neutral): kernel,
// strides, dilations, pads and auto_pad resolved into output sizes for 1-3 spatial
// dimensions. Used by the Conv/Pool schemas' shape inference and by every device's
// Conv/Pool kernels, so they agree on the output shape.
#pragma once

#include <cstdint>
#include <vector>

#include "xpuruntime/graph/ir.h"

namespace xpuruntime::ops {

struct Spatial {
  std::vector<int64_t> in, out, k, s, d, pb, pe;  // per spatial dim
  int64_t rank() const { return static_cast<int64_t>(in.size()); }
  int64_t in_size() const { return prod(in); }
  int64_t out_size() const { return prod(out); }
  int64_t k_size() const { return prod(k); }
  static int64_t prod(const std::vector<int64_t>& v) {
    int64_t p = 1;
    for (int64_t x : v) p *= x;
    return p;
  }
};

// `in` is the input shape [N, C, spatial...]; `kernel` the window (from the
// kernel_shape attribute or the weight's trailing dims). Validates everything and
// throws InvalidModelError (UnsupportedOperationError for a rank outside 3-5)
// naming the node.
Spatial make_spatial(const graph::Node& n, const graph::Shape& in,
                     const std::vector<int64_t>& kernel, bool ceil_mode);
// Conv: the window is kernel_shape, else W's trailing dims.
Spatial conv_geometry(const graph::Node& n, const graph::Shape& x, const graph::Shape& w);
// MaxPool/AveragePool: kernel_shape is required; ceil_mode honoured.
Spatial pool_geometry(const graph::Node& n, const graph::Shape& in);

}  // namespace xpuruntime::ops
