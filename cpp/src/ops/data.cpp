// Schemas of data movement and constants: Concat, Split, Slice, Gather,
// GatherElements, Pad, Cast, ConstantOfShape, Constant, Range, Trilu, CumSum.
#include <algorithm>
#include <cmath>

#include "ops/families.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/data.h"
#include "xpuruntime/ops/shape_rules.h"

namespace xpuruntime::ops {
namespace {

bool concat_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, std::max<std::size_t>(1, in.size()));  // variadic: none omitted
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!all_known(in)) return false;
  const int64_t r = in[0].rank();
  const int64_t axis = norm_axis(n, AxisAttrs::from_node(n).axis, r);
  Shape o = *in[0].shape;
  o[axis] = 0;
  for (const Meta& m : in) {
    XRT_CHECK(m.rank() == r && m.dtype == in[0].dtype, InvalidModelError, n.where(),
              ": inputs must share rank and dtype, got ", dtype_name(m.dtype),
              graph::shape_str(*m.shape), " and ", dtype_name(in[0].dtype),
              graph::shape_str(*in[0].shape));
    for (int64_t i = 0; i < r; ++i)
      XRT_CHECK(i == axis || (*m.shape)[i] == o[i], InvalidModelError, n.where(), ": input shapes ",
                graph::shape_str(*m.shape), " and ", graph::shape_str(*in[0].shape),
                " differ outside axis ", axis);
    o[axis] += (*m.shape)[axis];
  }
  out[0].shape = o;
  return true;
}

bool split_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 1);
  for (auto& o : out) {
    o.present = true;
    o.dtype = in[0].dtype;
  }
  if (!in[0].shape) return false;
  const int64_t axis = norm_axis(n, AxisAttrs::from_node(n).axis, in[0].rank());
  bool known = true;
  auto sizes = split_sizes(n, in, (*in[0].shape)[axis], out.size(), known);
  if (!known) return false;
  for (std::size_t i = 0; i < out.size(); ++i) {
    Shape s = *in[0].shape;
    s[axis] = sizes[i];
    out[i].shape = s;
  }
  return true;
}

bool slice_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 1);
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  std::vector<int64_t> st, en, ax, sp;
  if (!in[0].shape || !slice_inputs(n, in, st, en, ax, sp)) return false;
  auto plan = slice_plan(n, *in[0].shape, st, en, ax, sp);
  Shape o;
  for (auto& p : plan) o.push_back(p.count);
  out[0].shape = o;
  return true;
}

bool gather_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 2);
  XRT_CHECK(in[1].dtype == DType::kInt64 || in[1].dtype == DType::kInt32, InvalidModelError,
            n.where(), ": indices must be int32 or int64, got ", dtype_name(in[1].dtype));
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!all_known(in)) return false;
  const Shape& s = *in[0].shape;
  const int64_t axis = norm_axis(n, AxisAttrs::from_node(n).axis, static_cast<int64_t>(s.size()));
  Shape o(s.begin(), s.begin() + axis);
  o.insert(o.end(), in[1].shape->begin(), in[1].shape->end());
  o.insert(o.end(), s.begin() + axis + 1, s.end());
  out[0].shape = o;
  return true;
}

bool gatherElements_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 2);
  XRT_CHECK(in[1].dtype == DType::kInt64 || in[1].dtype == DType::kInt32, InvalidModelError,
            n.where(), ": indices must be int32 or int64, got ", dtype_name(in[1].dtype));
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!all_known(in)) return false;
  XRT_CHECK(in[0].rank() == in[1].rank() && in[0].rank() > 0, InvalidModelError, n.where(),
            ": data ", graph::shape_str(*in[0].shape), " and indices ",
            graph::shape_str(*in[1].shape), " must have the same rank >= 1");
  norm_axis(n, AxisAttrs::from_node(n).axis, in[0].rank());
  out[0].shape = in[1].shape;
  return true;
}

bool pad_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 1);
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!in[0].shape) return false;
  std::vector<int64_t> pads = PadAttrs::from_node(n).pads;
  std::vector<int64_t> axes;
  if (in.size() > 1 && in[1].present) {
    if (!in[1].has_value()) return false;
    pads = in[1].ints();
  }
  if (in.size() > 3 && in[3].present) {
    if (!in[3].has_value()) return false;
    axes = in[3].ints();
  }
  const Shape& s = *in[0].shape;
  const int64_t r = static_cast<int64_t>(s.size());
  auto full = pad_full(n, pads, axes, r);
  Shape o;
  for (int64_t i = 0; i < r; ++i) {
    o.push_back(s[i] + full[i] + full[i + r]);
    XRT_CHECK(o.back() >= 0, InvalidModelError, n.where(), ": pads crop more than the input");
  }
  out[0].shape = o;
  return true;
}

bool cast_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 1);
  out[0].present = true;
  out[0].dtype = dtype_from_onnx(n.attr_int("to", 1), n);
  out[0].shape = in[0].shape;
  return in[0].shape.has_value();
}

bool constantOfShape_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 1);
  const graph::Attr* v = n.attr("value");
  out[0].present = true;
  out[0].dtype = v && v->kind == graph::Attr::Kind::kTensor ? v->t.dtype : DType::kFloat32;
  if (!in[0].has_value()) return false;
  Shape s = in[0].ints();
  for (int64_t x : s) XRT_CHECK(x >= 0, InvalidModelError, n.where(), ": negative dimension ", x);
  out[0].shape = s;
  return true;
}

bool constant_infer(const Node& n, const std::vector<Meta>&, std::vector<Meta>& out) {
  graph::HostTensor t = constant_value(n);
  out[0] = out_meta(t.dtype, t.shape);
  return true;
}

bool range_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 3);
  for (std::size_t i = 0; i < 3; ++i) {
    static const char* kWhat[] = {"start", "limit", "delta"};
    require_scalar_input(n, in, i, kWhat[i], {in[0].dtype});
  }
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!in[0].has_value() || !in[1].has_value() || !in[2].has_value()) return false;
  const double s = in[0].floats()[0], l = in[1].floats()[0], dl = in[2].floats()[0];
  XRT_CHECK(dl != 0, InvalidModelError, n.where(), ": delta must not be 0");
  const double cnt = std::ceil((l - s) / dl);
  XRT_CHECK(cnt < 1e10, InvalidModelError, n.where(), ": range is too long");
  out[0].shape = Shape{std::max<int64_t>(0, static_cast<int64_t>(cnt))};
  return true;
}

bool trilu_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 1);
  require_scalar_input(n, in, 1, "k", {DType::kInt64});
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  out[0].shape = in[0].shape;
  if (in[0].shape)
    XRT_CHECK(in[0].rank() >= 2, InvalidModelError, n.where(), ": rank must be >= 2");
  return in[0].shape.has_value();
}

bool cumSum_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 2);
  // axis: one int32/int64 value (rank 0 or 1), in range when known.
  require_scalar_input(n, in, 1, "axis", {DType::kInt64, DType::kInt32});
  if (in[1].has_value() && in[0].shape) norm_axis(n, in[1].ints().at(0), in[0].rank());
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  out[0].shape = in[0].shape;
  return in[0].shape.has_value();
}

}  // namespace

AxisAttrs AxisAttrs::from_node(const Node& n) {
  AxisAttrs a;
  a.axis = n.attr_int("axis", 0);
  return a;
}

PadAttrs PadAttrs::from_node(const Node& n) {
  PadAttrs a;
  a.mode = n.attr_str("mode", "constant");
  XRT_CHECK(a.mode == "constant" || a.mode == "reflect" || a.mode == "edge" || a.mode == "wrap",
            InvalidModelError, n.where(), ": unknown mode '", a.mode, "'");
  a.pads = n.attr_ints("pads", {});
  a.value = n.attr_float("value", 0.0);
  return a;
}

CumSumAttrs CumSumAttrs::from_node(const Node& n) {
  CumSumAttrs a;
  a.exclusive = n.attr_int("exclusive", 0) != 0;
  a.reverse = n.attr_int("reverse", 0) != 0;
  return a;
}

TriluAttrs TriluAttrs::from_node(const Node& n) {
  TriluAttrs a;
  a.upper = n.attr_int("upper", 1) != 0;
  return a;
}

void register_data_schemas(std::vector<OpSchema>& s) {
  s.push_back(make_schema("Concat", {}, "Concat along one axis", concat_infer));
  s.push_back(make_schema(
      "Split", {}, "Split along one axis (sizes from input, attribute or equal)", split_infer));
  s.push_back(make_schema("Slice", {}, "Slice (numpy clamping, negative steps)", slice_infer));
  s.push_back(
      make_schema("Gather", {}, "Gather along one axis (negative indices allowed)", gather_infer));
  s.push_back(make_schema("GatherElements", {},
                          "GatherElements along one axis (negative indices allowed)",
                          gatherElements_infer));
  s.push_back(make_schema("Pad", {}, "Pad (constant, reflect, edge, wrap)", pad_infer));
  s.push_back(make_schema("Cast", {}, "Cast between the supported dtypes", cast_infer));
  s.push_back(make_schema("ConstantOfShape", {}, "ConstantOfShape", constantOfShape_infer));
  s.push_back(make_schema("Constant", {}, "Constant (value, value_float(s), value_int(s))",
                          constant_infer));
  s.push_back(make_schema("Range", {}, "Range(start, limit, delta)", range_infer));
  s.push_back(make_schema("Trilu", {}, "Trilu (upper or lower triangle of the last two dims)",
                          trilu_infer));
  s.push_back(make_schema("CumSum", {}, "CumSum (exclusive, reverse)", cumSum_infer));
}

}  // namespace xpuruntime::ops
