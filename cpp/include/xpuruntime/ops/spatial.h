// Window geometry shared by convolution and pooling (device-neutral): kernel,
// strides, dilations, pads and auto_pad resolved into output sizes for 1-3 spatial
// dimensions. Used by the Conv/Pool schemas' shape inference and by every device's
// Conv/Pool kernels, so they agree on the output shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xpuruntime/ir.h"

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

// The window attributes of Conv and the pools, parsed once from a node. Empty
// vectors mean the ONNX defaults (strides and dilations 1, pads 0), which depend
// on the input's rank.
struct WindowAttrs {
  std::string where;                  // the node, for error messages ("node 'c1' (Conv)")
  std::vector<int64_t> kernel_shape;  // empty: Conv takes W's trailing dims
  std::vector<int64_t> strides, dilations, pads;
  std::string auto_pad = "NOTSET";  // NOTSET, SAME_UPPER, SAME_LOWER, VALID
  bool ceil_mode = false;           // pools only

  // Throws InvalidModelError naming the node for an unknown auto_pad.
  static WindowAttrs from_node(const graph::Node& n);
};

struct ConvAttrs {
  WindowAttrs window;
  int64_t group = 1;
  static ConvAttrs from_node(const graph::Node& n);
};

struct PoolAttrs {
  WindowAttrs window;
  bool count_include_pad = false;  // AveragePool
  bool column_major_indices = false;  // MaxPool storage_order = 1
  // Throws InvalidModelError naming the node when kernel_shape is missing.
  static PoolAttrs from_node(const graph::Node& n);
};

// `in` is the input shape [N, C, spatial...]; `kernel` the window. Validates
// everything and throws InvalidModelError (UnsupportedOperationError for a rank
// outside 3-5) naming the node.
Spatial make_spatial(const WindowAttrs& a, const graph::Shape& in, const std::vector<int64_t>& kernel);
// Conv: the window is kernel_shape, else W's trailing dims.
Spatial conv_geometry(const ConvAttrs& a, const graph::Shape& x, const graph::Shape& w);
// MaxPool/AveragePool.
Spatial pool_geometry(const PoolAttrs& a, const graph::Shape& in);

// Channels-last layout (ops/conv.cpp): the permutation taking a logical [N, C, D1..]
// tensor to [N, D1.., C] (to_channels_last) and back (from_channels_last), for rank
// 3-5; permuted(s, p)[i] = s[p[i]], Transpose's rule.
std::vector<int64_t> to_channels_last(std::size_t rank);
std::vector<int64_t> from_channels_last(std::size_t rank);
graph::Shape permuted(const graph::Shape& s, const std::vector<int64_t>& perm);

}  // namespace xpuruntime::ops
