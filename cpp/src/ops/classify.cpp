// Schemas of IsNaN and IsInf (the SDPA attention of transformers' default
// export masks fully padded rows with IsNaN + Where) and of
// InstanceNormalization (wav2vec2's feature extractor: GroupNorm with one group
// per channel).
#include "xpuruntime/ops/classify.h"

#include "ops/families.h"
#include "xpuruntime/error.h"

namespace xpuruntime::ops {
namespace {

bool classify_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 1);
  out[0].present = true;
  out[0].dtype = DType::kBool;
  out[0].shape = in[0].shape;
  return in[0].shape.has_value();
}

bool instanceNorm_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 3);
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  out[0].shape = in[0].shape;
  if (!all_known(in)) return in[0].shape.has_value();
  const Shape& s = *in[0].shape;
  XRT_CHECK(s.size() >= 2, InvalidModelError, n.where(), ": input ", graph::shape_str(s),
            " must have rank >= 2 (N, C, ...)");
  for (int i = 1; i <= 2; ++i)
    XRT_CHECK(*in[i].shape == Shape{s[1]} && in[i].dtype == in[0].dtype, InvalidModelError,
              n.where(), ": ", i == 1 ? "scale " : "B ", dtype_name(in[i].dtype),
              graph::shape_str(*in[i].shape), " must be ", dtype_name(in[0].dtype), "[", s[1],
              "] (one value per channel)");
  return true;
}

}  // namespace

IsInfAttrs IsInfAttrs::from_node(const Node& n) {
  IsInfAttrs a;
  a.negative = n.attr_int("detect_negative", 1) != 0;
  a.positive = n.attr_int("detect_positive", 1) != 0;
  return a;
}

InstanceNormAttrs InstanceNormAttrs::from_node(const Node& n) {
  InstanceNormAttrs a;
  a.epsilon = n.attr_float("epsilon", 1e-5);
  return a;
}

void register_classify_schemas(std::vector<OpSchema>& s) {
  s.push_back(make_schema("IsNaN", kFloatTypes, "IsNaN elementwise (bool output)", classify_infer));
  s.push_back(make_schema("IsInf", kFloatTypes,
                          "IsInf elementwise (detect_negative, detect_positive; bool output)",
                          classify_infer));
  s.push_back(make_schema("InstanceNormalization", kFloatTypes,
                          "InstanceNormalization (per sample and channel over the spatial dims)",
                          instanceNorm_infer));
}

}  // namespace xpuruntime::ops
