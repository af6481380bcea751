// The channels-last layout pass: conversions of the ops that move or select along an
// axis (Concat, Split, Slice, channel shuffles), BatchNormalization, Shape and pooling.
// See layout_channels_last.cpp for the pass.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "core/half_float.h"
#include "graph/layout_channels_last.h"

namespace xpuruntime::graph::passes::channels_last {

// Concat / Split on any axis: the axis moves to its channels-last position.
bool ChannelsLast::convert_axis_op(const Node& n) {
  const bool concat = n.op_type == "Concat";
  const int x0 = n.inputs.empty() ? -1 : n.inputs[0];
  if (x0 < 0) return false;
  const int r = rank_of(x0);
  if (r < 3 || r > 5) return false;
  const std::size_t data_inputs = concat ? n.inputs.size() : 1;
  bool any_cl = false;
  for (std::size_t i = 0; i < data_inputs; ++i) {
    const int v = n.inputs[i];
    if (v < 0 || rank_of(v) != r) return false;
    any_cl = any_cl || produced_cl(v);
  }
  if (!any_cl) return false;
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return false;
  Node c = n;
  c.attrs["axis"] = Attr::of_int(cl_axis(axis, static_cast<std::size_t>(r)));
  for (std::size_t i = 0; i < data_inputs; ++i) c.inputs[i] = cl(n.inputs[i], r);
  for (std::size_t i = data_inputs; i < c.inputs.size(); ++i) c.inputs[i] = plain(c.inputs[i]);
  for (std::size_t o = 0; o < n.outputs.size(); ++o) {
    const int y = n.outputs[o];
    if (y < 0) continue;
    c.outputs[o] = fresh(g_.values[y].name + "_nhwc", y, true);
    set_produced_cl(y, c.outputs[o], r);
  }
  out_.push_back(std::move(c));
  ++converted_;
  return true;
}

bool ChannelsLast::convert_slice(const Node& n) {
  if (n.inputs.size() < 3 || n.outputs.size() != 1 || n.inputs[0] < 0 || !produced_cl(n.inputs[0]))
    return false;  // opset < 10 (attributes) stays as it is
  const int x = n.inputs[0];
  const int r = rank_of(x);
  if (r < 3 || r > 5) return false;
  // starts, ends, axes, steps: int64 constants (axes and steps may be omitted).
  auto ints = [&](std::size_t i, bool optional) -> std::optional<std::vector<int64_t>> {
    if (i >= n.inputs.size() || n.inputs[i] < 0)
      return optional ? std::optional<std::vector<int64_t>>(std::vector<int64_t>{}) : std::nullopt;
    const HostTensor& c = g_.values[n.inputs[i]].constant;
    if (!c.defined() || c.dtype != DType::kInt64) return std::nullopt;
    return c.to_ints();
  };
  const auto starts = ints(1, false), ends = ints(2, false), axes = ints(3, true);
  if (!starts || !ends || !axes || (n.inputs.size() > 4 && !ints(4, true))) return false;
  std::vector<int64_t> cl_axes = *axes;
  if (cl_axes.empty()) {
    cl_axes.resize(starts->size());
    std::iota(cl_axes.begin(), cl_axes.end(), 0);
  }
  if (cl_axes.size() != starts->size()) return false;
  for (int64_t& a : cl_axes) {
    if (a < 0) a += r;
    if (a < 0 || a >= r) return false;
    a = cl_axis(a, static_cast<std::size_t>(r));
  }
  Node c = n;
  c.inputs = {cl(x, r), n.inputs[1], n.inputs[2], int64_constant(n.name + "_axes_nhwc", cl_axes)};
  if (n.inputs.size() > 4 && n.inputs[4] >= 0) c.inputs.push_back(n.inputs[4]);
  const int y = n.outputs[0];
  c.outputs = {fresh(g_.values[y].name + "_nhwc", y, true)};
  set_produced_cl(y, c.outputs[0], r);
  out_.push_back(std::move(c));
  ++converted_;
  return true;
}

bool ChannelsLast::convert_reduce(const Node& n) {
  static const std::set<std::string> kReduces = {
      "ReduceMean", "ReduceSum", "ReduceMax",       "ReduceMin",       "ReduceProd",
      "ReduceL1",   "ReduceL2",  "ReduceSumSquare", "ReduceLogSumExp", "ReduceLogSum"};
  if (!kReduces.count(n.op_type) || n.inputs.empty() || n.inputs[0] < 0 || n.outputs.size() != 1 ||
      !produced_cl(n.inputs[0]))
    return false;
  const int x = n.inputs[0];
  const int r = rank_of(x);
  if (r < 3 || r > 5) return false;
  const bool axes_input = n.inputs.size() > 1 && n.inputs[1] >= 0;
  std::vector<int64_t> axes;
  if (axes_input) {
    const HostTensor& c = g_.values[n.inputs[1]].constant;
    if (!c.defined() || c.dtype != DType::kInt64) return false;
    axes = c.to_ints();
  } else {
    axes = n.attr_ints("axes", {});
  }
  if (axes.empty()) return false;  // every axis (or none): nothing to gain
  std::vector<bool> reduced(static_cast<std::size_t>(r), false);
  for (int64_t& a : axes) {
    if (a < 0) a += r;
    if (a < 0 || a >= r || reduced[static_cast<std::size_t>(a)]) return false;
    reduced[static_cast<std::size_t>(a)] = true;
    a = cl_axis(a, static_cast<std::size_t>(r));
  }
  const bool keepdims = n.attr_int("keepdims", 1) != 0;
  bool spatial_left = false;
  for (int d = 2; d < r; ++d) spatial_left = spatial_left || !reduced[static_cast<std::size_t>(d)];
  if (!keepdims && spatial_left && !reduced[1]) return false;
  Node c = n;
  c.inputs[0] = cl(x, r);
  if (axes_input) c.inputs[1] = int64_constant(n.name + "_axes_nhwc", axes);
  else c.attrs["axes"] = Attr::of_ints(axes);
  const int y = n.outputs[0];
  if (keepdims) {
    c.outputs = {fresh(g_.values[y].name + "_nhwc", y, true)};
    set_produced_cl(y, c.outputs[0], r);
    if (!spatial_left) ones_.insert(y);
  }
  out_.push_back(std::move(c));
  ++converted_;
  return true;
}

const Node* ChannelsLast::sole_reader(int v) const {
  auto it = readers_.find(v);
  if (it == readers_.end() || it->second.size() != 1 || patterns::is_output(g_, v)) return nullptr;
  const Node& r = g_.nodes[static_cast<std::size_t>(it->second[0])];
  return std::count(r.inputs.begin(), r.inputs.end(), v) == 1 ? &r : nullptr;
}

bool ChannelsLast::convert_channel_shuffle(const Node& n) {
  if (n.inputs.size() != 2 || n.outputs.size() != 1 || n.inputs[0] < 0 ||
      !produced_cl(n.inputs[0]) || rank_of(n.inputs[0]) != 4)
    return false;
  const int x = n.inputs[0];
  const std::optional<Shape>&xs = g_.values[x].shape, &ys = g_.values[n.outputs[0]].shape;
  if (!xs || !ys || ys->size() != 5) return false;
  for (int64_t d : *xs)
    if (d <= 0) return false;
  // [N, C, H, W] -> [N, g, C/g, H, W]
  if ((*ys)[0] != (*xs)[0] || (*ys)[1] * (*ys)[2] != (*xs)[1] || (*ys)[3] != (*xs)[2] ||
      (*ys)[4] != (*xs)[3])
    return false;
  const Node* t = sole_reader(n.outputs[0]);
  if (t == nullptr || t->op_type != "Transpose" || !t->domain.empty() || t->outputs.size() != 1 ||
      t->attr_ints("perm", {}) != Perm{0, 2, 1, 3, 4})
    return false;
  const Node* back = sole_reader(t->outputs[0]);
  if (back == nullptr || back->op_type != "Reshape" || !back->domain.empty() ||
      back->outputs.size() != 1 || back->inputs[0] != t->outputs[0])
    return false;
  const int w = back->outputs[0];
  if (!g_.values[w].shape || *g_.values[w].shape != *xs) return false;
  const int64_t batch = (*xs)[0], ch = (*xs)[1], h = (*xs)[2], wd = (*xs)[3], groups = (*ys)[1],
                per_group = (*ys)[2];
  auto value = [&](const std::string& name, const Shape& s) {
    const int v = g_.value_id(fresh_name(g_, name));
    g_.values[v].dtype = g_.values[x].dtype;
    g_.values[v].dtype_known = g_.values[x].dtype_known;
    g_.values[v].shape = s;
    return v;
  };
  const std::string base = g_.values[w].name;
  const int grouped = value(base + "_groups_nhwc", {batch, h, wd, groups, per_group});
  const int shuffled = value(base + "_shuffled_nhwc", {batch, h, wd, per_group, groups});
  const int out = fresh(base + "_nhwc", w, true);
  Node split;
  split.name = patterns::unique_node_name(g_, n.name + "_nhwc");
  split.op_type = "Reshape";
  split.inputs = {cl(x, 4),
                  int64_constant(n.name + "_nhwc_shape", {batch, h, wd, groups, per_group})};
  split.outputs = {grouped};
  Node swap;
  swap.name = patterns::unique_node_name(g_, t->name + "_nhwc");
  swap.op_type = "Transpose";
  swap.attrs["perm"] = Attr::of_ints({0, 1, 2, 4, 3});
  swap.inputs = {grouped};
  swap.outputs = {shuffled};
  Node merge;
  merge.name = patterns::unique_node_name(g_, back->name + "_nhwc");
  merge.op_type = "Reshape";
  merge.inputs = {shuffled, int64_constant(back->name + "_nhwc_shape", {batch, h, wd, ch})};
  merge.outputs = {out};
  out_.push_back(std::move(split));
  out_.push_back(std::move(swap));
  out_.push_back(std::move(merge));
  set_produced_cl(w, out, 4);
  absorbed_.insert(static_cast<int>(t - g_.nodes.data()));
  absorbed_.insert(static_cast<int>(back - g_.nodes.data()));
  converted_ += 3;
  return true;
}

bool ChannelsLast::convert_whole_norm(const Node& n) {
  if (n.inputs.size() != 2 || n.outputs.size() != 1 || n.inputs[0] < 0 ||
      !produced_cl(n.inputs[0]))
    return false;
  const int x = n.inputs[0];
  const int r = rank_of(x);
  const std::optional<Shape>&xs = g_.values[x].shape, &ys = g_.values[n.outputs[0]].shape;
  if (r < 3 || r > 5 || !xs || !ys || ys->size() != 3) return false;
  for (int64_t d : *xs)
    if (d <= 0) return false;
  if ((*ys)[0] != (*xs)[0] || (*ys)[1] != 1 || (*ys)[2] != shape_numel(*xs) / (*xs)[0])
    return false;
  const Node* norm = sole_reader(n.outputs[0]);
  if (norm == nullptr || norm->op_type != "InstanceNormalization" || !norm->domain.empty() ||
      norm->inputs.size() != 3 || norm->inputs[0] != n.outputs[0] || norm->outputs.size() != 1)
    return false;
  for (int i = 1; i < 3; ++i)
    if (norm->inputs[i] < 0 || !g_.values[norm->inputs[i]].constant.defined() ||
        g_.values[norm->inputs[i]].constant.numel() != 1)
      return false;
  const Node* back = sole_reader(norm->outputs[0]);
  if (back == nullptr || back->op_type != "Reshape" || !back->domain.empty() ||
      back->outputs.size() != 1 || back->inputs[0] != norm->outputs[0])
    return false;
  const int w = back->outputs[0];
  if (!g_.values[w].shape || *g_.values[w].shape != *xs) return false;
  const Shape cl_shape = ops::permuted(*xs, ops::to_channels_last(static_cast<std::size_t>(r)));
  auto value = [&](const std::string& name) {
    const int v = g_.value_id(fresh_name(g_, name));
    g_.values[v].dtype = g_.values[x].dtype;
    g_.values[v].dtype_known = g_.values[x].dtype_known;
    g_.values[v].shape = *ys;
    return v;
  };
  const std::string base = g_.values[w].name;
  const int flat = value(base + "_flat_nhwc"), normed = value(base + "_normed_nhwc");
  const int out = fresh(base + "_nhwc", w, true);
  Node flatten = n;
  flatten.name = patterns::unique_node_name(g_, n.name + "_nhwc");
  flatten.inputs = {cl(x, r), int64_constant(n.name + "_nhwc_shape", *ys)};
  flatten.outputs = {flat};
  Node in = *norm;
  in.name = patterns::unique_node_name(g_, norm->name + "_nhwc");
  in.inputs[0] = flat;
  in.outputs = {normed};
  Node unflatten = *back;
  unflatten.name = patterns::unique_node_name(g_, back->name + "_nhwc");
  unflatten.inputs = {normed, int64_constant(back->name + "_nhwc_shape", cl_shape)};
  unflatten.outputs = {out};
  out_.push_back(std::move(flatten));
  out_.push_back(std::move(in));
  out_.push_back(std::move(unflatten));
  set_produced_cl(w, out, r);
  absorbed_.insert(static_cast<int>(norm - g_.nodes.data()));
  absorbed_.insert(static_cast<int>(back - g_.nodes.data()));
  converted_ += 3;
  return true;
}

// Inference BatchNormalization with constant parameters: y = x * a + b per channel,
// a = scale / sqrt(var + eps), b = bias - mean * a, as a Mul and an Add over [C].
bool ChannelsLast::convert_batchnorm(const Node& n) {
  if (n.inputs.size() < 5 || n.outputs.size() != 1 || !produced_cl(n.inputs[0])) return false;
  const int r = rank_of(n.inputs[0]);
  if (r < 3 || r > 5 || n.attr_int("training_mode", 0) != 0) return false;
  for (int i = 1; i < 5; ++i)
    if (n.inputs[i] < 0 || !g_.values[n.inputs[i]].constant.defined() ||
        g_.values[n.inputs[i]].constant.shape.size() != 1)
      return false;
  // The Mul and Add take x's dtype (a reduced-precision plan's BatchNormalization
  // reads float16/bfloat16 activations; its factors are computed in double and
  // rounded once).
  const DType xt = g_.values[n.inputs[0]].dtype;
  if (xt != DType::kFloat32 && xt != DType::kFloat16 && xt != DType::kBFloat16) return false;
  const HostTensor &s = g_.values[n.inputs[1]].constant, &b = g_.values[n.inputs[2]].constant,
                   &m = g_.values[n.inputs[3]].constant, &var = g_.values[n.inputs[4]].constant;
  const int64_t ch = s.numel();
  if (b.numel() != ch || m.numel() != ch || var.numel() != ch) return false;
  const double eps = n.attr_float("epsilon", 1e-5);
  HostTensor a = HostTensor::alloc(xt, {ch}), sh = HostTensor::alloc(xt, {ch});
  auto put = [&](HostTensor& t, int64_t j, double v) {
    if (xt == DType::kFloat32) {
      t.ptr<float>()[j] = static_cast<float>(v);
    } else if (xt == DType::kFloat16) {
      const float f = std::isfinite(v) ? static_cast<float>(std::clamp(v, -65504.0, 65504.0))
                                       : static_cast<float>(v);
      t.ptr<uint16_t>()[j] = matmul::float_to_half(f);
    } else {
      t.ptr<uint16_t>()[j] = matmul::float_to_bf16(static_cast<float>(v));
    }
  };
  for (int64_t j = 0; j < ch; ++j) {
    const double aj = s.float_at(j) / std::sqrt(var.float_at(j) + eps);
    put(a, j, aj);
    put(sh, j, b.float_at(j) - m.float_at(j) * aj);
  }
  auto constant = [&](const HostTensor& t, const std::string& suffix) {
    const int v = g_.value_id(fresh_name(g_, n.name + suffix));
    g_.values[v].constant = t;
    g_.values[v].dtype = xt;
    g_.values[v].dtype_known = true;
    g_.values[v].shape = t.shape;
    return v;
  };
  const int y = n.outputs[0];
  const int mid = fresh(g_.values[y].name + "_scaled_nhwc", y, true);
  const int out = fresh(g_.values[y].name + "_nhwc", y, true);
  Node mul;
  mul.name = patterns::unique_node_name(g_, n.name + "_scale");
  mul.op_type = "Mul";
  mul.inputs = {cl(n.inputs[0], r), constant(a, "_nhwc_scale")};
  mul.outputs = {mid};
  Node add;
  add.name = patterns::unique_node_name(g_, n.name + "_shift");
  add.op_type = "Add";
  add.inputs = {mid, constant(sh, "_nhwc_shift")};
  add.outputs = {out};
  out_.push_back(std::move(mul));
  out_.push_back(std::move(add));
  set_produced_cl(y, out, r);
  ++converted_;
  return true;
}

// Shape of a channels-last value: its dims gathered back into the model's order.
bool ChannelsLast::convert_shape(const Node& n) {
  const int x = n.inputs[0];
  if (!produced_cl(x) || n.has("start") || n.has("end")) return false;
  const int r = rank_of(x);
  const int y = n.outputs[0];
  const int raw = g_.value_id(fresh_name(g_, g_.values[y].name + "_nhwc"));
  g_.values[raw].dtype = DType::kInt64;
  g_.values[raw].dtype_known = true;
  Node s = n;
  s.inputs = {cl_.at(x)};
  s.outputs = {raw};
  Node gather;
  gather.name = patterns::unique_node_name(g_, n.name + "_nchw_order");
  gather.op_type = "Gather";
  gather.attrs["axis"] = Attr::of_int(0);
  // NCHW dim i sits at channels-last position from_channels_last[i].
  gather.inputs = {raw, int64_constant(n.name + "_perm", ops::from_channels_last(r))};
  gather.outputs = {y};
  out_.push_back(std::move(s));
  out_.push_back(std::move(gather));
  ++converted_;
  return true;
}

// Pooling on a channels-last value, where an Nhwc* pooling kernel runs it.
bool ChannelsLast::convert_pool(const Node& n) {
  const int x = n.inputs[0];
  if (!produced_cl(x) || (n.outputs.size() > 1 && n.outputs[1] >= 0)) return false;
  const int r = rank_of(x);
  const DType t = g_.values[x].dtype;
  if (r < 3 || r > 5 ||
      (t != DType::kFloat32 && t != DType::kFloat16 && t != DType::kBFloat16))
    return false;
  const std::string op = "Nhwc" + n.op_type;  // kernel_runs asks the registry for t
  if (!kernel_runs(n, op, {x})) return false;
  Node c = n;
  c.op_type = op;
  c.domain = "xrt";
  c.inputs = {cl(x, r)};
  const int y = n.outputs[0];
  c.outputs = {fresh(g_.values[y].name + "_nhwc", y, true)};
  set_produced_cl(y, c.outputs[0], r);
  if (n.op_type.rfind("Global", 0) == 0) ones_.insert(y);
  out_.push_back(std::move(c));
  ++converted_;
  return true;
}

}  // namespace xpuruntime::graph::passes::channels_last
