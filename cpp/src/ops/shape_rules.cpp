// Shape, data-movement and reduction rules (see xpuruntime/ops/shape_rules.h).
#include "xpuruntime/ops/shape_rules.h"

#include <algorithm>
#include <string>

#include "xpuruntime/checked.h"
#include "xpuruntime/error.h"

namespace xpuruntime::ops {

using graph::HostTensor;
using graph::shape_numel;
using graph::shape_str;

namespace {

// Element count of a shape taken from a model: InvalidModelError naming the node when
// the product does not fit int64 (a wrapped count could pass the checks below).
int64_t numel_of(const Node& n, const Shape& s, const char* what) {
  int64_t p = 1;
  for (int64_t d : s) p = checked_mul<InvalidModelError>(p, d, n.where() + ": " + what);
  return p;
}

}  // namespace

Shape reshape_target(const Node& n, const Shape& in, const std::vector<int64_t>& spec) {
  const bool allowzero = n.attr_int("allowzero", 0) != 0;
  Shape out(spec.size());
  int64_t infer_at = -1, known = 1;
  for (std::size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (d == 0 && !allowzero) {
      XRT_CHECK(i < in.size(), InvalidModelError, n.where(), ": shape ", shape_str(spec),
                " copies dimension ", i, " (0) but the input ", shape_str(in), " has rank ",
                in.size());
      d = in[i];
    }
    if (d == -1) {
      XRT_CHECK(infer_at < 0, InvalidModelError, n.where(), ": shape ", shape_str(spec),
                " has more than one -1");
      infer_at = static_cast<int64_t>(i);
      continue;
    }
    XRT_CHECK(d >= 0, InvalidModelError, n.where(), ": invalid dimension ", d, " in shape ",
              shape_str(spec));
    out[i] = d;
    known = checked_mul<InvalidModelError>(known, d, n.where() + ": reshape target size");
  }
  const int64_t total = numel_of(n, in, "reshape input size");
  if (infer_at >= 0) {
    XRT_CHECK(known != 0 && total % known == 0, InvalidModelError, n.where(), ": cannot reshape ",
              shape_str(in), " (", total, " elements) into ", shape_str(spec));
    out[infer_at] = total / known;
  }
  const int64_t got = numel_of(n, out, "reshape target size");
  XRT_CHECK(got == total, InvalidModelError, n.where(), ": cannot reshape ", shape_str(in), " (",
            total, " elements) into ", shape_str(out), " (", got, " elements)");
  return out;
}

std::pair<int64_t, int64_t> shape_range(const Node& n, int64_t rank) {
  auto clampi = [rank](int64_t v) {
    if (v < 0) v += rank;
    return v < 0 ? 0 : (v > rank ? rank : v);
  };
  int64_t b = clampi(n.attr_int("start", 0));
  int64_t e = n.has("end") ? clampi(n.attr_int("end", rank)) : rank;
  return {b, e < b ? b : e};
}

std::vector<int64_t> transpose_perm(const Node& n, int64_t rank) {
  std::vector<int64_t> perm = n.attr_ints("perm", {});
  if (perm.empty()) {
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  XRT_CHECK(static_cast<int64_t>(perm.size()) == rank, InvalidModelError, n.where(), ": perm has ",
            perm.size(), " entries for rank ", rank);
  std::vector<bool> seen(rank, false);
  for (int64_t& p : perm) {
    p = norm_axis(n, p, rank);
    XRT_CHECK(!seen[p], InvalidModelError, n.where(), ": perm repeats axis ", p);
    seen[p] = true;
  }
  return perm;
}

DType dtype_from_onnx(int64_t code, const Node& n) {
  switch (code) {
    case 1:
      return DType::kFloat32;
    case 2:
      return DType::kUInt8;
    case 3:
      return DType::kInt8;
    case 5:
      return DType::kInt16;
    case 6:
      return DType::kInt32;
    case 7:
      return DType::kInt64;
    case 9:
      return DType::kBool;
    case 10:
      return DType::kFloat16;
    case 11:
      return DType::kFloat64;
    case 16:
      return DType::kBFloat16;
    default:
      break;
  }
  XRT_THROW(UnsupportedOperationError, n.where(), ": ONNX element type ", code,
            " is not supported (supported: float, double, float16, bfloat16, int8/16/32/64, "
            "uint8, bool)");
}

std::vector<int64_t> pad_full(const Node& n, const std::vector<int64_t>& pads,
                              std::vector<int64_t> axes, int64_t rank) {
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  const std::size_t k = axes.size();
  XRT_CHECK(pads.size() == 2 * k, InvalidModelError, n.where(), ": pads has ", pads.size(),
            " values, expected ", 2 * k);
  std::vector<int64_t> full(2 * rank, 0);
  for (std::size_t i = 0; i < k; ++i) {
    const int64_t a = norm_axis(n, axes[i], rank);
    full[a] = pads[i];
    full[a + rank] = pads[i + k];
  }
  return full;
}

HostTensor constant_value(const Node& n) {
  if (const graph::Attr* v = n.attr("value"); v && v->kind == graph::Attr::Kind::kTensor)
    return v->t;
  if (n.has("value_float")) {
    HostTensor t = HostTensor::alloc(DType::kFloat32, {});
    *t.ptr<float>() = static_cast<float>(n.attr_float("value_float", 0));
    return t;
  }
  if (n.has("value_int")) {
    HostTensor t = HostTensor::alloc(DType::kInt64, {});
    *t.ptr<int64_t>() = n.attr_int("value_int", 0);
    return t;
  }
  if (n.has("value_floats")) {
    auto v = n.attr_floats("value_floats");
    HostTensor t = HostTensor::alloc(DType::kFloat32, {static_cast<int64_t>(v.size())});
    for (std::size_t i = 0; i < v.size(); ++i) t.ptr<float>()[i] = static_cast<float>(v[i]);
    return t;
  }
  if (n.has("value_ints")) {
    auto v = n.attr_ints("value_ints");
    HostTensor t = HostTensor::alloc(DType::kInt64, {static_cast<int64_t>(v.size())});
    for (std::size_t i = 0; i < v.size(); ++i) t.ptr<int64_t>()[i] = v[i];
    return t;
  }
  XRT_THROW(UnsupportedOperationError, n.where(),
            ": only value, value_float(s) and value_int(s) Constants are supported "
            "(sparse and string constants are not)");
}

std::vector<int64_t> axes_input(const Node& n, const std::vector<Meta>& in, bool& known) {
  known = true;
  if (in.size() > 1 && in[1].present) {
    if (!in[1].has_value()) {
      known = false;
      return {};
    }
    return in[1].ints();
  }
  return n.attr_ints("axes", {});
}

std::vector<SliceAxis> slice_plan(const Node& n, const Shape& s, const std::vector<int64_t>& starts,
                                  const std::vector<int64_t>& ends, std::vector<int64_t> axes,
                                  std::vector<int64_t> steps) {
  const int64_t r = static_cast<int64_t>(s.size());
  XRT_CHECK(starts.size() == ends.size(), InvalidModelError, n.where(),
            ": starts and ends differ in length");
  if (axes.empty())
    for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  XRT_CHECK(axes.size() == starts.size() && steps.size() == starts.size(), InvalidModelError,
            n.where(), ": starts, ends, axes and steps must have the same length");
  std::vector<SliceAxis> plan(r);
  for (int64_t i = 0; i < r; ++i) plan[i] = {0, 1, s[i]};
  std::vector<bool> seen(r, false);
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = norm_axis(n, axes[i], r);
    XRT_CHECK(!seen[a], InvalidModelError, n.where(), ": axis ", axes[i], " repeated");
    seen[a] = true;
    const int64_t dim = s[a];
    XRT_CHECK(steps[i] != 0, InvalidModelError, n.where(), ": step must not be 0");
    // A step past the dimension takes one element, as a step of dim + 1 does; clamping
    // keeps the count arithmetic and the kernels' offsets from wrapping (INT64_MIN).
    const int64_t lim = dim < INT64_MAX ? dim + 1 : dim;
    const int64_t step = std::clamp<int64_t>(steps[i], -lim, lim);
    int64_t b = starts[i], e = ends[i];
    if (b < 0) b += dim;
    if (e < 0) e += dim;
    if (step > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      plan[a] = {b, step, e > b ? (e - b + step - 1) / step : 0};
    } else {
      b = std::clamp<int64_t>(b, -1, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      plan[a] = {b, step, b > e ? (b - e + (-step) - 1) / (-step) : 0};
    }
  }
  return plan;
}

bool slice_inputs(const Node& n, const std::vector<Meta>& in, std::vector<int64_t>& st,
                  std::vector<int64_t>& en, std::vector<int64_t>& ax, std::vector<int64_t>& sp) {
  if (in.size() >= 3 && in[1].present) {  // opset >= 10
    XRT_CHECK(in[2].present, InvalidModelError, n.where(), ": input 2 (ends) is required");
    for (std::size_t i = 1; i < in.size(); ++i)
      if (in[i].present && !in[i].has_value()) return false;
    st = in[1].ints();
    en = in[2].ints();
    if (in.size() > 3 && in[3].present) ax = in[3].ints();
    if (in.size() > 4 && in[4].present) sp = in[4].ints();
  } else {
    st = n.attr_ints("starts", {});
    en = n.attr_ints("ends", {});
    ax = n.attr_ints("axes", {});
  }
  return true;
}

std::vector<int64_t> split_sizes(const Node& n, const std::vector<Meta>& in, int64_t dim,
                                 std::size_t outputs, bool& known) {
  known = true;
  std::vector<int64_t> sizes;
  if (in.size() > 1 && in[1].present) {
    if (!in[1].has_value()) {
      known = false;
      return {};
    }
    sizes = in[1].ints();
  } else {
    sizes = n.attr_ints("split", {});
  }
  XRT_CHECK(outputs > 0, InvalidModelError, n.where(), ": Split needs at least one output");
  if (sizes.empty()) {
    const int64_t k = static_cast<int64_t>(outputs);
    const int64_t chunk = (dim + k - 1) / k;  // opset 18: last chunk may be smaller
    for (int64_t i = 0; i < k; ++i)
      sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - i * chunk)));
  }
  XRT_CHECK(sizes.size() == outputs, InvalidModelError, n.where(), ": split has ", sizes.size(),
            " sizes but the node has ", outputs, " outputs");
  int64_t total = 0;
  for (int64_t v : sizes) {
    XRT_CHECK(v >= 0, InvalidModelError, n.where(), ": negative split size");
    total = checked_add<InvalidModelError>(total, v, n.where() + ": split sizes");
  }
  XRT_CHECK(total == dim, InvalidModelError, n.where(), ": split sizes sum to ", total,
            " but the axis has ", dim, " elements");
  return sizes;
}

ReduceAttrs ReduceAttrs::from_node(const Node& n) {
  ReduceAttrs a;
  a.where = n.where();
  a.axes = n.attr_ints("axes", {});
  a.keepdims = n.attr_int("keepdims", 1) != 0;
  a.noop_with_empty_axes = n.attr_int("noop_with_empty_axes", 0) != 0;
  return a;
}

bool reduce_axes(const ReduceAttrs& a, const std::vector<Meta>& in, int64_t rank,
                 std::vector<int64_t>& axes, bool& noop) {
  std::vector<int64_t> raw;
  const bool from_input = in.size() > 1 && in[1].present;
  if (from_input) {
    if (!in[1].has_value()) return false;
    raw = in[1].ints();
  } else {
    raw = a.axes;
  }
  noop = false;
  if (raw.empty()) {
    if (a.noop_with_empty_axes) {
      noop = true;
    } else {
      for (int64_t i = 0; i < rank; ++i) raw.push_back(i);
    }
  }
  axes.clear();
  for (int64_t x : raw) {
    const int64_t v = x < 0 ? x + rank : x;
    XRT_CHECK(v >= 0 && v < rank, InvalidModelError, a.where, ": axis ", x,
              " is out of range for rank ", rank);
    axes.push_back(v);
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return true;
}

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& axes, bool keep) {
  Shape out;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) {
    bool r = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!r)
      out.push_back(s[i]);
    else if (keep)
      out.push_back(1);
  }
  return out;
}

}  // namespace xpuruntime::ops
