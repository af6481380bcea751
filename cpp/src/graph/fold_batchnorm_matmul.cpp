// BatchNormalization folded into the MatMul before it (passes.h): a linear layer over
// the last axis, y = x·W (+ b), whose output reaches an inference-mode BN through at
// most a bias Add and a Reshape/Flatten to [rows, C] (LeViT's `bn(x.flatten(0, 1))` on
// [B, N, C] tokens). BN's channel axis (axis 1 of its 2-D input) is then W's column
// axis, so BN(y) = x·(W·diag(a)) + ((b - mean)·a + beta) with a = scale/sqrt(var+eps):
// the scale goes into W's columns, the shift into a bias Add after the MatMul (the
// epilogue fusion folds it into the GEMM). Conv and Gemm are folded by fold_batchnorm
// (passes.cpp) with the same arithmetic, in double, rounded once to float32.
//
// Left as they are: a BN whose channel axis is not W's column axis (a 3-D or 4-D BN
// input: its axis 1 is a row axis of the product), a non-constant or non-2-D W, any
// intermediate value read elsewhere or a graph output, a Reshape that changes the last
// extent (columns would mix), a bias that is not a constant of C values along the last
// axis, and dtypes other than float32 (the pass runs before precision lowering).
#include <cmath>

#include "graph/passes.h"

namespace xpuruntime::graph::passes {
namespace {

bool is_output(const Graph& g, int v) {
  for (int o : g.outputs)
    if (o == v) return true;
  return false;
}

bool const_f32(const Graph& g, int v) {
  return v >= 0 && g.values[v].constant.defined() && g.values[v].constant.dtype == DType::kFloat32;
}

// A constant float32 bias of exactly C values along the last axis of a rank-`rank`
// result: shape [C] or [1, .., 1, C] of at most that rank.
bool is_column_bias(const Graph& g, int v, int64_t c, std::size_t rank) {
  if (!const_f32(g, v)) return false;
  const Shape& s = g.values[v].constant.shape;
  if (s.empty() || s.size() > rank || s.back() != c) return false;
  for (std::size_t i = 0; i + 1 < s.size(); ++i)
    if (s[i] != 1) return false;
  return true;
}

int add_constant(Graph& g, const std::string& prefix, HostTensor t) {
  const int v = g.value_id(fresh_name(g, prefix));
  Value& val = g.values[v];
  val.dtype = DType::kFloat32;
  val.dtype_known = true;
  val.shape = t.shape;
  val.constant = std::move(t);
  return v;
}

// Folds BN node `k` when the pattern holds; true when it did.
bool fold_one(Graph& g, const std::vector<std::vector<int>>& cons, int k) {
  const Node bn = g.nodes[k];  // a copy: the node is rewritten below
  if (bn.inputs.size() < 5 || bn.outputs.empty() || bn.outputs[0] < 0) return false;
  if (bn.attr_int("training_mode", 0) != 0) return false;
  for (std::size_t j = 1; j < bn.outputs.size(); ++j)
    if (bn.outputs[j] >= 0) return false;  // running statistics asked for
  // An intermediate value the fold rewrites: read by exactly one node, not an output.
  auto private_value = [&](int v) {
    return v >= 0 && g.values[v].producer >= 0 && cons[v].size() == 1 && !is_output(g, v);
  };
  int x = bn.inputs[0];
  if (!private_value(x)) return false;
  const Value& bx = g.values[x];
  if (!bx.shape || bx.shape->size() != 2 || bx.dtype != DType::kFloat32) return false;
  // Walk back: [Reshape|Flatten] <- [Add bias] <- MatMul.
  int reshape = -1, add = -1, mm = -1;
  int p = g.values[x].producer;
  if (g.nodes[p].op_type == "Reshape" || g.nodes[p].op_type == "Flatten") {
    reshape = p;
    x = g.nodes[p].inputs[0];
    if (!private_value(x)) return false;
    p = g.values[x].producer;
  }
  if (g.nodes[p].op_type == "Add") {
    add = p;
    const Node& a = g.nodes[p];
    if (a.inputs.size() != 2) return false;
    // The bias may be either operand; the other is the MatMul's output.
    const int other = g.values[a.inputs[0]].constant.defined() ? a.inputs[1] : a.inputs[0];
    if (!private_value(other)) return false;
    x = other;
    p = g.values[x].producer;
  }
  if (g.nodes[p].op_type != "MatMul" || !g.nodes[p].domain.empty()) return false;
  mm = p;
  const Node& m = g.nodes[mm];
  if (m.inputs.size() != 2 || !const_f32(g, m.inputs[1])) return false;
  const HostTensor w = g.values[m.inputs[1]].constant;  // shares the bytes
  if (w.shape.size() != 2) return false;
  const int64_t c = w.shape[1];
  const Value& y = g.values[m.outputs[0]];
  if (!y.shape || y.shape->empty() || y.shape->back() != c || y.dtype != DType::kFloat32)
    return false;
  if (bx.shape->back() != c) return false;  // a Reshape kept the columns
  const Shape yshape = *y.shape;            // references into g.values end where values are added
  int bias = -1;
  if (add >= 0) {
    const Node& a = g.nodes[add];
    bias = a.inputs[0] == m.outputs[0] ? a.inputs[1] : a.inputs[0];
    const Value& ao = g.values[a.outputs[0]];
    if (!is_column_bias(g, bias, c, yshape.size()) || !ao.shape || *ao.shape != yshape)
      return false;
  }
  for (int i = 1; i < 5; ++i)
    if (!const_f32(g, bn.inputs[i]) || g.values[bn.inputs[i]].constant.numel() != c) return false;

  const HostTensor& sc = g.values[bn.inputs[1]].constant;
  const HostTensor& bb = g.values[bn.inputs[2]].constant;
  const HostTensor& mu = g.values[bn.inputs[3]].constant;
  const HostTensor& var = g.values[bn.inputs[4]].constant;
  const double eps = bn.attr_float("epsilon", 1e-5);
  HostTensor nw = HostTensor::alloc(DType::kFloat32, w.shape);
  HostTensor nb = HostTensor::alloc(DType::kFloat32, {c});
  std::vector<double> a(static_cast<std::size_t>(c));
  for (int64_t j = 0; j < c; ++j) {
    a[j] = sc.float_at(j) / std::sqrt(var.float_at(j) + eps);
    const double b0 = bias >= 0 ? g.values[bias].constant.float_at(j) : 0.0;
    nb.ptr<float>()[j] = static_cast<float>((b0 - mu.float_at(j)) * a[j] + bb.float_at(j));
  }
  const float* src = w.ptr<const float>();
  float* dst = nw.ptr<float>();
  for (int64_t i = 0; i < w.numel(); ++i) dst[i] = static_cast<float>(src[i] * a[i % c]);
  const std::string base = g.nodes[mm].name.empty() ? "matmul" : g.nodes[mm].name;
  const int wv = add_constant(g, base + "_bnfold_w", std::move(nw));
  const int bv = add_constant(g, base + "_bnfold_b", std::move(nb));
  g.nodes[mm].inputs[1] = wv;
  if (add >= 0) {
    Node& an = g.nodes[add];
    (an.inputs[0] == bias ? an.inputs[0] : an.inputs[1]) = bv;
  } else {
    // MatMul -> t, Add(t, shift) -> the MatMul's old output value (read by the Reshape,
    // or the BN's input itself).
    const int t = g.value_id(fresh_name(g, base + "_bnfold_y"));
    g.values[t].dtype = DType::kFloat32;
    g.values[t].dtype_known = true;
    g.values[t].shape = yshape;
    Node an;
    an.name = base + "_bnfold_add";
    an.op_type = "Add";
    an.inputs = {t, bv};
    an.outputs = {g.nodes[mm].outputs[0]};
    g.nodes[mm].outputs[0] = t;
    g.values[t].producer = mm;
    g.values[an.outputs[0]].producer = -1;
    add = g.add_node(std::move(an));
  }
  // The node that fed the BN now writes the BN's output value.
  const int last = reshape >= 0 ? reshape : add;
  g.values[g.nodes[last].outputs[0]].producer = -1;
  g.nodes[last].outputs[0] = bn.outputs[0];
  g.values[bn.outputs[0]].producer = last;
  g.nodes[k].op_type.clear();
  return true;
}

}  // namespace

int fold_batchnorm_into_matmul(Graph& g) {
  const auto cons = consumers(g);
  int folded = 0;
  const std::size_t n = g.nodes.size();
  for (std::size_t k = 0; k < n; ++k)
    if (g.nodes[k].op_type == "BatchNormalization" && g.nodes[k].domain.empty() &&
        fold_one(g, cons, static_cast<int>(k)))
      ++folded;
  if (folded) compact(g);
  return folded;
}

}  // namespace xpuruntime::graph::passes
