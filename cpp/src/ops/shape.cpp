// Schemas of the shape-changing ops: Reshape, Flatten, Squeeze, Unsqueeze (views
// of their input), Shape, Size, Expand, Transpose, Tile. Every dtype.
#include "ops/families.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/shape_rules.h"

namespace xpuruntime::ops {
namespace {

bool reshape_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 2);
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!in[0].shape || !in[1].has_value()) return false;
  out[0].shape = reshape_target(n, *in[0].shape, in[1].ints());
  return true;
}

bool flatten_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 1);
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!in[0].shape) return false;
  const Shape& s = *in[0].shape;
  int64_t axis = norm_axis(n, n.attr_int("axis", 1), static_cast<int64_t>(s.size()), true);
  int64_t a = 1, b = 1;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) (i < axis ? a : b) *= s[i];
  out[0].shape = Shape{a, b};
  return true;
}

bool squeeze_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 1);
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  bool known = true;
  std::vector<int64_t> axes = axes_input(n, in, known);
  if (!in[0].shape || !known) return false;
  const Shape& s = *in[0].shape;
  const int64_t r = static_cast<int64_t>(s.size());
  std::vector<bool> drop(r, false);
  if (axes.empty()) {
    for (int64_t i = 0; i < r; ++i) drop[i] = s[i] == 1;
  }
  for (int64_t a : axes) {
    int64_t ax = norm_axis(n, a, r);
    XRT_CHECK(s[ax] == 1, InvalidModelError, n.where(), ": cannot squeeze axis ", a, " of size ",
              s[ax], " in shape ", graph::shape_str(s));
    drop[ax] = true;
  }
  Shape o;
  for (int64_t i = 0; i < r; ++i)
    if (!drop[i]) o.push_back(s[i]);
  out[0].shape = o;
  return true;
}

bool unsqueeze_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 1);
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  bool known = true;
  std::vector<int64_t> axes = axes_input(n, in, known);
  if (!in[0].shape || !known) return false;
  const Shape& s = *in[0].shape;
  const int64_t r = static_cast<int64_t>(s.size() + axes.size());
  std::vector<bool> ins(r, false);
  for (int64_t a : axes) {
    int64_t ax = norm_axis(n, a, r);
    XRT_CHECK(!ins[ax], InvalidModelError, n.where(), ": axis ", a, " repeated");
    ins[ax] = true;
  }
  Shape o;
  std::size_t j = 0;
  for (int64_t i = 0; i < r; ++i) o.push_back(ins[i] ? 1 : s[j++]);
  out[0].shape = o;
  return true;
}

bool shape_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 1);
  XRT_CHECK(in.size() == 1, InvalidModelError, n.where(), ": takes one input, got ", in.size());
  out[0].present = true;
  out[0].dtype = DType::kInt64;
  if (!in[0].shape) return false;
  auto [b, e] = shape_range(n, in[0].rank());
  out[0].shape = Shape{e - b};
  return true;
}

bool size_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 1);
  XRT_CHECK(in.size() == 1, InvalidModelError, n.where(), ": takes one input, got ", in.size());
  out[0] = out_meta(DType::kInt64, {});
  // Known (and foldable from the shape alone) only when the input's shape is.
  return in[0].shape.has_value();
}

bool expand_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 2);
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!in[0].shape || !in[1].has_value()) return false;
  out[0].shape = broadcast_shapes(n, {*in[0].shape, in[1].ints()});
  return true;
}

bool transpose_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 1);
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!in[0].shape) return false;
  const Shape& s = *in[0].shape;
  std::vector<int64_t> perm = transpose_perm(n, static_cast<int64_t>(s.size()));
  Shape o;
  for (int64_t p : perm) o.push_back(s[p]);
  out[0].shape = o;
  return true;
}

bool tile_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 2);
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!in[0].shape || !in[1].has_value()) return false;
  std::vector<int64_t> rep = in[1].ints();
  const Shape& s = *in[0].shape;
  XRT_CHECK(rep.size() == s.size(), InvalidModelError, n.where(), ": repeats has ", rep.size(),
            " entries for an input of rank ", s.size());
  Shape o;
  for (std::size_t i = 0; i < s.size(); ++i) {
    XRT_CHECK(rep[i] >= 0, InvalidModelError, n.where(), ": negative repeat");
    o.push_back(s[i] * rep[i]);
  }
  out[0].shape = o;
  return true;
}

}  // namespace

void register_shape_schemas(std::vector<OpSchema>& s) {
  auto alias = [&](const std::string& type, const std::string& desc, InferFn infer) {
    OpSchema d = make_schema(type, {}, desc, std::move(infer));
    d.alias = true;
    s.push_back(std::move(d));
  };
  alias("Reshape", "Reshape (a view of its input)", reshape_infer);
  alias("Flatten", "Flatten to 2-D (a view of its input)", flatten_infer);
  alias("Squeeze", "Squeeze (a view of its input)", squeeze_infer);
  alias("Unsqueeze", "Unsqueeze (a view of its input)", unsqueeze_infer);
  s.push_back(make_schema("Shape", {},
                          "Shape (start/end), folded at compile time when the shape is known",
                          shape_infer));
  s.push_back(make_schema("Size", {}, "Size (number of elements)", size_infer));
  s.push_back(make_schema("Expand", {}, "Expand with numpy broadcasting", expand_infer));
  s.push_back(make_schema("Transpose", {}, "Transpose (any permutation)", transpose_infer));
  s.push_back(make_schema("Tile", {}, "Tile", tile_infer));
}

}  // namespace xpuruntime::ops
