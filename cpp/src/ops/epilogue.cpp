// Epilogue <-> node attributes (see xpuruntime/ops/epilogue.h).
#include "xpuruntime/ops/epilogue.h"

#include <algorithm>
#include <iterator>

#include "xpuruntime/error.h"

namespace xpuruntime::ops {
namespace {

using graph::Attr;
using graph::Node;

// The activation kind of op type `op` (Gelu with its approximation); false when
// unary_kind does not know it.
bool activation_kind(const Node& owner, const std::string& op, const std::string& approximate,
                     Unary& kind) {
  if (op == "Clip") {
    kind = Unary::kClip;
    return true;
  }
  Node a;
  a.name = owner.name;
  a.op_type = op;
  if (op == "Gelu") a.attrs["approximate"] = Attr::of_string(approximate);
  return unary_kind(a, kind);
}

}  // namespace

Epilogue Epilogue::from_node(const Node& n) {
  Epilogue e;
  e.bias = n.attr_int("_bias", 0) != 0;
  e.residual = n.attr_int("_sum", 0) != 0;
  e.activation_op = n.attr_str("_act", "");
  if (e.activation_op.empty()) return e;
  e.approximate = n.attr_str("_approximate", "none");
  XRT_CHECK(activation_kind(n, e.activation_op, e.approximate, e.activation), InvalidModelError,
            n.where(), ": unknown fused activation '", e.activation_op, "'");
  e.params.alpha = n.attr_float("_alpha", 0.0);
  e.params.beta = n.attr_float("_beta", 0.0);
  e.params.lo = n.attr_float("_lo", -INFINITY);
  e.params.hi = n.attr_float("_hi", INFINITY);
  return e;
}

bool Epilogue::activation_of(const Node& act, double lo, double hi, Epilogue& out) {
  static const char* kActs[] = {"Relu",      "Sigmoid",   "Tanh", "HardSigmoid",
                                "HardSwish", "LeakyRelu", "Gelu", "Clip"};
  if (std::find_if(std::begin(kActs), std::end(kActs),
                   [&](const char* s) { return act.op_type == s; }) == std::end(kActs))
    return false;
  Epilogue e = out;
  e.activation_op = act.op_type;
  e.approximate = act.op_type == "Gelu" ? act.attr_str("approximate", "none") : "none";
  if (!activation_kind(act, e.activation_op, e.approximate, e.activation)) return false;
  e.params = UnaryParams{};
  if (act.op_type == "Clip") {
    e.params.lo = lo;
    e.params.hi = hi;
  } else if (act.op_type == "HardSigmoid") {
    e.params.alpha = act.attr_float("alpha", 0.2);
    e.params.beta = act.attr_float("beta", 0.5);
  } else if (act.op_type == "LeakyRelu") {
    e.params.alpha = act.attr_float("alpha", 0.01);
  }
  out = e;
  return true;
}

void Epilogue::to_attrs(std::map<std::string, Attr>& attrs) const {
  if (bias) attrs["_bias"] = Attr::of_int(1);
  if (residual) attrs["_sum"] = Attr::of_int(1);
  if (!has_activation()) return;
  attrs["_act"] = Attr::of_string(activation_op);
  attrs["_lo"] = Attr::of_float(params.lo);
  attrs["_hi"] = Attr::of_float(params.hi);
  attrs["_alpha"] = Attr::of_float(params.alpha);
  attrs["_beta"] = Attr::of_float(params.beta);
  if (activation_op == "Gelu") attrs["_approximate"] = Attr::of_string(approximate);
}

}  // namespace xpuruntime::ops
