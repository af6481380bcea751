// The epilogue the compiler fuses into a Conv, MatMul or Gemm node: a bias row, a
// residual and an activation applied while the output is still in cache. This
// header is the one place that reads and writes its node attributes; fusion
// passes build an Epilogue and call to_attrs(), kernels call from_node().
//
// Node attributes (kept in plan files and in the decision log's case attributes):
//   "_bias"  int 1      MatMul: input 2 is a row of N elements added to every row
//   "_sum"   int 1      Conv: input 3 (the output's shape) is added before the activation
//   "_act"   string     the absorbed activation's ONNX op type (Relu, Sigmoid, Tanh,
//                       HardSigmoid, HardSwish, LeakyRelu, Gelu, Clip)
//   "_alpha", "_beta"   float: LeakyRelu alpha, HardSigmoid alpha and beta (else 0)
//   "_lo", "_hi"        float: Clip bounds (else -inf, inf)
//   "_approximate"      string: Gelu's approximate attribute ("none" or "tanh")
#pragma once

#include <map>
#include <string>

#include "xpuruntime/ir.h"
#include "xpuruntime/ops/elementwise.h"

namespace xpuruntime::ops {

struct Epilogue {
  bool bias = false;      // MatMul: input 2 is a bias row
  bool residual = false;  // Conv: input 3 is added before the activation
  // The activation, when activation_op is not empty.
  std::string activation_op;  // ONNX op type, e.g. "Relu"
  Unary activation = Unary::kIdentity;
  UnaryParams params;
  std::string approximate = "none";  // Gelu only

  bool has_activation() const { return !activation_op.empty(); }
  bool empty() const { return !bias && !residual && !has_activation(); }

  // Reads a node's epilogue; throws InvalidModelError naming the node for an
  // activation the engine cannot apply.
  static Epilogue from_node(const graph::Node& n);
  // The activation epilogue for absorbing `act` (an activation node) whose Clip
  // bounds, when inputs, are `lo`/`hi`; false when `act` cannot be an epilogue.
  static bool activation_of(const graph::Node& act, double lo, double hi, Epilogue& out);
  // Writes the attributes above (only those in use) into attrs.
  void to_attrs(std::map<std::string, graph::Attr>& attrs) const;
};

}  // namespace xpuruntime::ops
