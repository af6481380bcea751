// Helpers shared by the shape and data-movement ops.
#pragma once

#include <utility>
#include <vector>

#include "backends/cpu/ops/cpu_op.h"

namespace xpuruntime::cpu {

// dst (contiguous, out_shape) = src read with element strides src_strides.
void strided_copy(const void* src, void* dst, std::size_t es, const Shape& out_shape,
                  const Shape& src_strides);

// Shape's [start, end) after clamping (opset 15 attributes).
inline std::pair<int64_t, int64_t> shape_range(const Node& n, int64_t rank) {
  auto clampi = [rank](int64_t v) {
    if (v < 0) v += rank;
    return v < 0 ? 0 : (v > rank ? rank : v);
  };
  int64_t b = clampi(n.attr_int("start", 0));
  int64_t e = n.has("end") ? clampi(n.attr_int("end", rank)) : rank;
  return {b, e < b ? b : e};
}

// Transpose's permutation (default: reversed), validated.
inline std::vector<int64_t> transpose_perm(const Node& n, int64_t rank) {
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

// ONNX TensorProto element type -> DType; UnsupportedOperationError otherwise.
DType dtype_from_onnx(int64_t code, const Node& n);

// Pads for every axis ([begin..., end...], 2*rank) from pads over `axes`.
inline std::vector<int64_t> pad_full(const Node& n, const std::vector<int64_t>& pads,
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

// The tensor a Constant node produces.
inline HostTensor constant_value(const Node& n) {
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

}  // namespace xpuruntime::cpu
