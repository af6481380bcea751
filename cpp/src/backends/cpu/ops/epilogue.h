// Epilogues the compiler fuses into Conv/MatMul/Gemm: an activation recorded on
// the node as "_act" (the ONNX op type of the absorbed activation) with its
// parameters "_alpha", "_beta", "_lo", "_hi".
#pragma once

#include "backends/cpu/ops/elementwise.h"

namespace xpuruntime::cpu {

// The fused activation of a node; false when it has none.
inline bool node_activation(const Node& n, Unary& kind, UnaryParams& p) {
  const std::string act = n.attr_str("_act", "");
  if (act.empty()) return false;
  Node a;
  a.name = n.name;
  a.op_type = act;
  if (act == "Gelu") a.attrs["approximate"] = graph::Attr::of_string(n.attr_str("_approximate", "none"));
  if (act == "Clip") {
    kind = Unary::kClip;
  } else {
    XRT_CHECK(unary_kind(a, kind), InvalidModelError, n.where(), ": unknown fused activation '",
              act, "'");
  }
  p.alpha = n.attr_float("_alpha", 0.0);
  p.beta = n.attr_float("_beta", 0.0);
  p.lo = n.attr_float("_lo", -INFINITY);
  p.hi = n.attr_float("_hi", INFINITY);
  return true;
}

// Applies the node's fused activation to y in place (no-op without one).
inline void apply_node_activation(const Node& n, TensorView& y) {
  Unary k;
  UnaryParams p;
  if (node_activation(n, k, p)) run_unary(k, p, y.dtype, y.data, y.data, y.numel());
}

// y[..., j] += bias[j] over the last dimension.
inline void add_row_bias(TensorView& y, const TensorView& bias) {
  const int64_t nn = bias.numel();
  if (nn == 0) return;
  const int64_t rows = y.numel() / nn;
  visit_dtype(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    using N = Num<T>;
    T* py = y.ptr<T>();
    const T* pb = bias.ptr<const T>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < nn; ++j)
        py[r * nn + j] = N::store(static_cast<typename N::C>(N::load(py[r * nn + j]) + N::load(pb[j])));
  });
}

}  // namespace xpuruntime::cpu
