// Schemas of the index ops: GatherND, ScatterND, ScatterElements (the dynamo
// exporter's masked-attention gathers, torchvision Swin's window masks).
#include "xpuruntime/ops/index.h"

#include "ops/families.h"
#include "xpuruntime/error.h"

namespace xpuruntime::ops {
namespace {

void require_index_dtype(const Node& n, const Meta& m, const char* what) {
  XRT_CHECK(m.dtype == DType::kInt64 || m.dtype == DType::kInt32, InvalidModelError, n.where(),
            ": ", what, " must be int32 or int64, got ", dtype_name(m.dtype));
}

bool gatherND_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 2);
  require_index_dtype(n, in[1], "indices");
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!all_known(in)) return false;
  const Shape& ds = *in[0].shape;
  const Shape& is = *in[1].shape;
  const int64_t b = GatherNDAttrs::from_node(n).batch_dims;
  const int64_t r = static_cast<int64_t>(ds.size()), q = static_cast<int64_t>(is.size());
  XRT_CHECK(r >= 1 && q >= 1 && b >= 0 && b < std::min(r, q), InvalidModelError, n.where(),
            ": needs data and indices of rank >= 1 and 0 <= batch_dims < "
            "min(ranks), got data ",
            graph::shape_str(ds), ", indices ", graph::shape_str(is), ", batch_dims ", b);
  for (int64_t i = 0; i < b; ++i)
    XRT_CHECK(ds[i] == is[i], InvalidModelError, n.where(), ": the ", b,
              " batch dimensions of data ", graph::shape_str(ds), " and indices ",
              graph::shape_str(is), " differ");
  const int64_t last = is.back();
  XRT_CHECK(last >= 1 && last <= r - b, InvalidModelError, n.where(), ": indices' last dimension (",
            last, ") must be in [1, ", r - b, "] (data rank minus batch_dims)");
  Shape o(is.begin(), is.end() - 1);
  o.insert(o.end(), ds.begin() + b + last, ds.end());
  out[0].shape = o;
  return true;
}

bool scatterND_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 3);
  require_index_dtype(n, in[1], "indices");
  ScatterAttrs::from_node(n);
  XRT_CHECK(in[2].dtype == in[0].dtype, InvalidModelError, n.where(), ": updates (",
            dtype_name(in[2].dtype), ") must have data's dtype (", dtype_name(in[0].dtype), ")");
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  out[0].shape = in[0].shape;
  if (!all_known(in)) return in[0].shape.has_value();
  const Shape& ds = *in[0].shape;
  const Shape& is = *in[1].shape;
  const Shape& us = *in[2].shape;
  XRT_CHECK(!is.empty() && is.back() >= 1 && is.back() <= static_cast<int64_t>(ds.size()),
            InvalidModelError, n.where(), ": indices ", graph::shape_str(is),
            " need a last dimension in [1, data rank ", ds.size(), "]");
  Shape want(is.begin(), is.end() - 1);
  want.insert(want.end(), ds.begin() + is.back(), ds.end());
  XRT_CHECK(us == want, InvalidModelError, n.where(), ": updates ", graph::shape_str(us),
            " must have shape ", graph::shape_str(want),
            " (indices.shape[:-1] + data.shape[indices.shape[-1]:])");
  return true;
}

bool scatterElements_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 3);
  require_index_dtype(n, in[1], "indices");
  const ScatterAttrs a = ScatterAttrs::from_node(n);
  XRT_CHECK(in[2].dtype == in[0].dtype, InvalidModelError, n.where(), ": updates (",
            dtype_name(in[2].dtype), ") must have data's dtype (", dtype_name(in[0].dtype), ")");
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  out[0].shape = in[0].shape;
  if (!all_known(in)) return in[0].shape.has_value();
  const Shape& ds = *in[0].shape;
  const Shape& is = *in[1].shape;
  XRT_CHECK(!ds.empty() && is.size() == ds.size() && *in[2].shape == is, InvalidModelError,
            n.where(), ": data ", graph::shape_str(ds), ", indices ", graph::shape_str(is),
            " and updates ", graph::shape_str(*in[2].shape),
            " must have one rank >= 1, and indices and updates one shape");
  const int64_t axis = norm_axis(n, a.axis, static_cast<int64_t>(ds.size()));
  for (std::size_t i = 0; i < ds.size(); ++i)
    XRT_CHECK(static_cast<int64_t>(i) == axis || is[i] <= ds[i], InvalidModelError, n.where(),
              ": indices ", graph::shape_str(is), " exceed data ", graph::shape_str(ds),
              " outside axis ", axis);
  return true;
}

}  // namespace

GatherNDAttrs GatherNDAttrs::from_node(const Node& n) {
  GatherNDAttrs a;
  a.batch_dims = n.attr_int("batch_dims", 0);
  return a;
}

ScatterAttrs ScatterAttrs::from_node(const Node& n) {
  ScatterAttrs a;
  a.axis = n.attr_int("axis", 0);
  const std::string r = n.attr_str("reduction", "none");
  if (r == "none")
    a.reduction = ScatterReduction::kNone;
  else if (r == "add")
    a.reduction = ScatterReduction::kAdd;
  else if (r == "mul")
    a.reduction = ScatterReduction::kMul;
  else if (r == "max")
    a.reduction = ScatterReduction::kMax;
  else if (r == "min")
    a.reduction = ScatterReduction::kMin;
  else
    XRT_THROW(InvalidModelError, n.where(), ": unknown reduction '", r,
              "' (expected none, add, mul, max or min)");
  return a;
}

void register_index_schemas(std::vector<OpSchema>& s) {
  s.push_back(make_schema("GatherND", {}, "GatherND (batch_dims; negative indices allowed)",
                          gatherND_infer));
  s.push_back(make_schema("ScatterND", {},
                          "ScatterND (reduction none, add, mul, max, min; "
                          "negative indices allowed)",
                          scatterND_infer));
  s.push_back(make_schema("ScatterElements", {},
                          "ScatterElements along one axis (reduction none, "
                          "add, mul, max, min; negative indices)",
                          scatterElements_infer));
}

}  // namespace xpuruntime::ops
