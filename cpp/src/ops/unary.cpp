// Schemas of the unary elementwise ops (activations, math functions), Not, Clip,
// and the identities Identity and Dropout (aliases of their input); the op type ->
// Unary kind table (xpuruntime/ops/elementwise.h).
#include "ops/families.h"
#include "xpuruntime/ops/elementwise.h"

namespace xpuruntime::ops {
namespace {

struct UnaryEntry {
  const char* op;
  Unary kind;
  bool signed_types;  // integers too (else floats only)
};

const UnaryEntry kUnaryOps[] = {
    {"Neg", Unary::kNeg, true},
    {"Abs", Unary::kAbs, true},
    {"Sqrt", Unary::kSqrt, false},
    {"Exp", Unary::kExp, false},
    {"Log", Unary::kLog, false},
    {"Erf", Unary::kErf, false},
    {"Tanh", Unary::kTanh, false},
    {"Sigmoid", Unary::kSigmoid, false},
    {"Relu", Unary::kRelu, true},
    {"LeakyRelu", Unary::kLeakyRelu, false},
    {"HardSigmoid", Unary::kHardSigmoid, false},
    {"HardSwish", Unary::kHardSwish, false},
    {"Gelu", Unary::kGelu, false},
    {"Reciprocal", Unary::kReciprocal, false},
    {"Floor", Unary::kFloor, false},
    {"Ceil", Unary::kCeil, false},
    {"Round", Unary::kRound, false},
    {"Sin", Unary::kSin, false},
    {"Cos", Unary::kCos, false},
    {"Softplus", Unary::kSoftplus, false},
    {"Sign", Unary::kSign, true},
    {"Elu", Unary::kElu, false},
};

bool identity_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_scalar_input(n, in, 1, "ratio");  // Dropout's optional ratio and training_mode
  require_scalar_input(n, in, 2, "training_mode", {DType::kBool});
  const bool ok = infer_same(n, in, out);
  if (out.size() > 1) {  // Dropout's mask: all true in inference
    out[1].present = true;
    out[1].dtype = DType::kBool;
    out[1].shape = in[0].shape;
  }
  return ok;
}

}  // namespace

bool unary_kind(const Node& n, Unary& kind) {
  if (n.op_type == "Gelu") {
    kind = n.attr_str("approximate", "none") == "tanh" ? Unary::kGeluTanh : Unary::kGelu;
    return true;
  }
  if (n.op_type == "Not") {
    kind = Unary::kNot;
    return true;
  }
  for (const UnaryEntry& e : kUnaryOps) {
    if (n.op_type == e.op) {
      kind = e.kind;
      return true;
    }
  }
  return false;
}

const std::vector<std::string>& unary_op_types() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> v;
    for (const UnaryEntry& e : kUnaryOps) v.emplace_back(e.op);
    return v;
  }();
  return types;
}

UnaryParams unary_params(const Node& n, Unary k) {
  UnaryParams p;
  if (k == Unary::kLeakyRelu) p.alpha = n.attr_float("alpha", 0.01);
  if (k == Unary::kElu) p.alpha = n.attr_float("alpha", 1.0);
  if (k == Unary::kHardSigmoid) {
    p.alpha = n.attr_float("alpha", 0.2);
    p.beta = n.attr_float("beta", 0.5);
  }
  return p;
}

void register_unary_schemas(std::vector<OpSchema>& s) {
  for (const UnaryEntry& e : kUnaryOps)
    s.push_back(make_schema(e.op, e.signed_types ? kSignedTypes : kFloatTypes,
                            std::string(e.op) + " elementwise", infer_same));
  s.push_back(make_schema("Not", {DType::kBool}, "logical not", infer_same));
  s.push_back(make_schema("Clip", kNumericTypes, "Clip(x, min, max)", infer_same));
  for (const std::string t : {"Identity", "Dropout"}) {
    OpSchema d =
        make_schema(t, {}, t + (t == "Dropout" ? " (inference: identity)" : ""), identity_infer);
    d.alias = true;
    s.push_back(std::move(d));
  }
}

}  // namespace xpuruntime::ops
