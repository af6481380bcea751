// The schema of FusedAttention (xpuruntime/ops/attention.h): shape and dtype
// inference with the checks every device's kernel relies on (rank-4 Q/K/V whose
// batch, head and length dimensions agree, a mask that broadcasts to the scores).
// Never folded: the compiler creates it after folding.
#include "xpuruntime/ops/attention.h"

#include "ops/families.h"
#include "xpuruntime/error.h"

namespace xpuruntime::ops {
namespace {

bool attention_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 3);
  const AttentionAttrs a = AttentionAttrs::from_node(n);
  const bool has_mask = in.size() > 3 && in[3].present;
  XRT_CHECK(has_mask == (a.mask == AttentionAttrs::Mask::kAdditive), InvalidModelError, n.where(),
            ": mask_kind '", AttentionAttrs::mask_name(a.mask), "' but the mask input is ",
            has_mask ? "present" : "absent", "; give input 3 exactly when mask_kind is 'additive'");
  for (std::size_t i = 1; i < in.size(); ++i)
    if (in[i].present)
      XRT_CHECK(in[i].dtype == in[0].dtype || (i == 3 && in[i].dtype == DType::kFloat32),
                InvalidModelError, n.where(), ": input ", i, " is ", dtype_name(in[i].dtype),
                " but the query is ", dtype_name(in[0].dtype),
                "; key and value take the query's dtype, the mask that or float32");
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!all_known(in)) return false;
  // The logical [B, H, S, D] shapes (a "_bshd" input is [B, S, H, D]).
  auto logical = [&](const Shape& s, int bit) {
    return (a.bshd & bit) && s.size() == 4 ? Shape{s[0], s[2], s[1], s[3]} : s;
  };
  const Shape q = logical(*in[0].shape, AttentionAttrs::kBshdQ),
              k = logical(*in[1].shape, AttentionAttrs::kBshdK),
              v = logical(*in[2].shape, AttentionAttrs::kBshdV);
  XRT_CHECK(q.size() == 4 && k.size() == 4 && v.size() == 4, InvalidModelError, n.where(),
            ": query, key and value must be 4-D [batch, heads, seq, head_dim], got ", shape_str(q),
            ", ", shape_str(k), ", ", shape_str(v));
  // Grouped-query attention: key/value heads may be fewer, dividing the query's
  // (query head h reads key/value head h / (Hq / Hkv), as repeat_kv lays them out).
  XRT_CHECK(k[0] == q[0] && v[0] == q[0] && v[1] == k[1] && k[1] > 0 && q[1] % k[1] == 0,
            InvalidModelError, n.where(), ": batch and head dimensions differ between query ",
            shape_str(q), ", key ", shape_str(k), " and value ", shape_str(v),
            " (key and value share a head count that divides the query's)");
  XRT_CHECK(k[3] == q[3] && v[2] == k[2], InvalidModelError, n.where(), ": key ", shape_str(k),
            " must have the query's head_dim (", q[3], ") and value ", shape_str(v),
            " the key's length (", k[2], ")");
  XRT_CHECK(!a.causal || q[2] == k[2], InvalidModelError, n.where(),
            ": is_causal needs as many queries as keys, got ", q[2], " and ", k[2]);
  if (has_mask) {
    const Shape& m = *in[3].shape;
    const Shape full = {q[0], q[1], q[2], k[2]};
    bool ok = m.size() <= 4;
    for (std::size_t i = 0; ok && i < m.size(); ++i) {
      const int64_t f = full[4 - m.size() + i];
      ok = m[i] == 1 || m[i] == f;
    }
    XRT_CHECK(ok, InvalidModelError, n.where(), ": mask ", shape_str(m),
              " does not broadcast to the scores ", shape_str(full));
  }
  out[0].shape = (a.bshd & AttentionAttrs::kBshdOut) ? Shape{q[0], q[2], q[1], v[3]}
                                                     : Shape{q[0], q[1], q[2], v[3]};
  return true;
}

}  // namespace

AttentionAttrs AttentionAttrs::from_node(const Node& n) {
  AttentionAttrs a;
  a.scale = n.attr_float("scale", 1.0);
  a.causal = n.attr_int("is_causal", 0) != 0;
  a.nan_rows_zero = n.attr_int("nan_rows_zero", 0) != 0;
  a.bshd = static_cast<int>(n.attr_int("_bshd", 0));
  XRT_CHECK(a.bshd >= 0 && a.bshd <= 15, InvalidModelError, n.where(), ": _bshd ", a.bshd,
            " is not a mask of the bits Q 1, K 2, V 4, output 8");
  const std::string m = n.attr_str("mask_kind", "none");
  if (m == "additive") {
    a.mask = Mask::kAdditive;
  } else {
    XRT_CHECK(m == "none", InvalidModelError, n.where(), ": mask_kind '", m,
              "' is not one of 'none', 'additive'");
  }
  return a;
}

void AttentionAttrs::to_attrs(std::map<std::string, graph::Attr>& attrs) const {
  attrs["scale"] = graph::Attr::of_float(scale);
  attrs["is_causal"] = graph::Attr::of_int(causal ? 1 : 0);
  attrs["mask_kind"] = graph::Attr::of_string(mask_name(mask));
  if (nan_rows_zero) attrs["nan_rows_zero"] = graph::Attr::of_int(1);
  if (bshd != 0) attrs["_bshd"] = graph::Attr::of_int(bshd);
}

void register_attention_schemas(std::vector<OpSchema>& s) {
  OpSchema d = make_schema("FusedAttention", {DType::kFloat32, DType::kFloat16, DType::kBFloat16},
                           "softmax(scale * Q K^T + mask [causal]) V, the attention subgraph fused "
                           "by the compiler",
                           attention_infer);
  d.key = "attention";
  d.domain = "xrt";
  d.foldable = false;
  s.push_back(std::move(d));
}

}  // namespace xpuruntime::ops
