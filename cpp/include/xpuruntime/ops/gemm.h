// Attributes of ONNX Gemm (Y = alpha * op(A) op(B) + beta * C), parsed once from a
// node: the Gemm schema's shape inference and every device's Gemm kernel read
// them here. (The GEMM problem handed to matmul kernels is ops/matmul/.)
#pragma once

#include "xpuruntime/ir.h"

namespace xpuruntime::ops {

struct GemmAttrs {
  bool trans_a = false;
  bool trans_b = false;
  double alpha = 1.0;
  double beta = 1.0;
  static GemmAttrs from_node(const graph::Node& n);
};

}  // namespace xpuruntime::ops
