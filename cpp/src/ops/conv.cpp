// The Conv schema: NCHW-style convolution over 1-3 spatial dims with groups,
// strides, dilations and pads/auto_pad; the compiler may fuse a bias, a residual
// ("_sum") and an activation into it. NhwcConv (domain xrt): the same convolution on
// channels-last activations [N, D1.., C] (weights stay ONNX [M, C/g, k..]), which the
// channels-last layout pass (graph/layout_channels_last.cpp) creates.
#include "ops/families.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/spatial.h"

namespace xpuruntime::ops {
namespace {

bool conv_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 2);
  XRT_CHECK(in[0].dtype == in[1].dtype, InvalidModelError, n.where(), ": X is ",
            dtype_name(in[0].dtype), " but W is ", dtype_name(in[1].dtype));
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!in[0].shape || !in[1].shape) return false;
  const Shape& x = *in[0].shape;
  const Shape& w = *in[1].shape;
  XRT_CHECK(w.size() == x.size() && x.size() >= 3, InvalidModelError, n.where(), ": X ",
            graph::shape_str(x), " and W ", graph::shape_str(w), " must have the same rank >= 3");
  const ConvAttrs attrs = ConvAttrs::from_node(n);
  const int64_t group = attrs.group;
  XRT_CHECK(group >= 1 && x[1] % group == 0 && w[0] % group == 0 && w[1] * group == x[1],
            InvalidModelError, n.where(), ": channels do not match: X has ", x[1],
            " channels, W is ", graph::shape_str(w), ", group ", group,
            " (need W.shape[1] * group == X.shape[1])");
  if (in.size() > 2 && in[2].present && in[2].shape) {
    XRT_CHECK(graph::shape_numel(*in[2].shape) == w[0], InvalidModelError, n.where(), ": bias has ",
              graph::shape_numel(*in[2].shape), " elements, expected ", w[0]);
  }
  const Spatial g = conv_geometry(attrs, x, w);
  Shape s = {x[0], w[0]};
  s.insert(s.end(), g.out.begin(), g.out.end());
  out[0].shape = s;
  return true;
}

// NhwcConv: Conv's inference on the channels-last shapes moved to NCHW and back.
bool nhwc_conv_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 2);
  std::vector<Meta> logical = in;
  if (in[0].shape) {
    XRT_CHECK(in[0].shape->size() >= 3 && in[0].shape->size() <= 5, InvalidModelError, n.where(),
              ": X ", graph::shape_str(*in[0].shape), " must have rank 3 to 5 [N, D1.., C]");
    logical[0].shape = permuted(*in[0].shape, from_channels_last(in[0].shape->size()));
  }
  if (!conv_infer(n, logical, out)) return false;
  out[0].shape = permuted(*out[0].shape, to_channels_last(out[0].shape->size()));
  return true;
}

}  // namespace

std::vector<int64_t> to_channels_last(std::size_t rank) {
  std::vector<int64_t> p = {0};
  for (std::size_t i = 2; i < rank; ++i) p.push_back(static_cast<int64_t>(i));
  p.push_back(1);
  return p;
}

std::vector<int64_t> from_channels_last(std::size_t rank) {
  std::vector<int64_t> p = {0, static_cast<int64_t>(rank) - 1};
  for (std::size_t i = 1; i + 1 < rank; ++i) p.push_back(static_cast<int64_t>(i));
  return p;
}

Shape permuted(const Shape& s, const std::vector<int64_t>& perm) {
  Shape r(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) r[i] = s[static_cast<std::size_t>(perm[i])];
  return r;
}

void register_conv_schemas(std::vector<OpSchema>& s) {
  s.push_back(make_schema("Conv", {DType::kFloat32, DType::kFloat64},
                          "Conv over 1-3 spatial dims (groups, strides, dilations, pads)",
                          conv_infer));
  OpSchema d = make_schema("NhwcConv", {DType::kFloat32, DType::kFloat16, DType::kBFloat16},
                           "Conv on channels-last activations [N, D1.., C] (weights [M, C/g, k..]), "
                           "created by the compiler's channels-last layout pass",
                           nhwc_conv_infer);
  d.key = "conv_nhwc";
  d.domain = "xrt";
  d.foldable = false;
  s.push_back(std::move(d));
}

}  // namespace xpuruntime::ops
