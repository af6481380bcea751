// Attributes of the normalization ops and softmax, parsed once from a node: the
// schemas' shape inference and every device's kernels read them here.
#pragma once

#include <cstdint>

#include "xpuruntime/ir.h"

namespace xpuruntime::ops {

// Softmax / LogSoftmax (opset >= 13: one axis).
struct SoftmaxAttrs {
  int64_t axis = -1;
  static SoftmaxAttrs from_node(const graph::Node& n);
};

// LayerNormalization: normalizes the trailing axes from `axis`.
struct LayerNormAttrs {
  int64_t axis = -1;
  double epsilon = 1e-5;
  int64_t stash_type = 1;  // 1: mean/inv-std outputs are float32, else input 0's dtype
  static LayerNormAttrs from_node(const graph::Node& n);
};

// BatchNormalization, inference form (training_mode must be 0).
struct BatchNormAttrs {
  double epsilon = 1e-5;
  bool training_mode = false;
  static BatchNormAttrs from_node(const graph::Node& n);
};

}  // namespace xpuruntime::ops
