// Schemas of the channels-last pools of domain "xrt": NhwcMaxPool, NhwcAveragePool,
// NhwcGlobalAveragePool, NhwcGlobalMaxPool. The compiler's layout pass rewrites the
// ONNX pools between channels-last convolutions into them, so X is [N, D1.., C]
// (C innermost) and the result [N, O1.., C]; the semantics are exactly the ONNX op's
// applied to X transposed to [N, C, D1..] and transposed back. The window
// attributes are the ONNX ones (PoolAttrs), and the geometry is make_spatial's on
// the permuted shape, so NCHW and NHWC pools agree on every output size and error.
// MaxPool's Indices output has no channels-last form (storage_order, which only
// orders those indices, has no effect). Never folded: the compiler creates them
// after folding.
#include "ops/families.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/spatial.h"

namespace xpuruntime::ops {
namespace {

// Throws InvalidModelError unless s is [N, spatial dims.., C] of rank min_rank to 5.
void require_channels_last_rank(const Node& n, const Shape& s, std::size_t min_rank) {
  XRT_CHECK(s.size() >= min_rank && s.size() <= 5, InvalidModelError, n.where(), ": input ",
            graph::shape_str(s), " has rank ", s.size(),
            "; a channels-last pool takes [N, spatial dims.., C] with ",
            min_rank == 3 ? "1 to 3" : "0 to 3", " spatial dimensions (rank ", min_rank, " to 5)");
}

void require_one_output(const Node& n) {
  for (std::size_t i = 1; i < n.outputs.size(); ++i)
    XRT_CHECK(n.outputs[i] < 0, InvalidModelError, n.where(), ": has ", n.outputs.size(),
              " outputs but a channels-last pool has one (MaxPool's Indices output has no "
              "channels-last form); keep a MaxPool whose indices are used in NCHW");
}

bool nhwc_pool_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 1);
  require_one_output(n);
  const PoolAttrs a = PoolAttrs::from_node(n);  // kernel_shape present, auto_pad known
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!in[0].shape) return false;
  const Shape& s = *in[0].shape;
  require_channels_last_rank(n, s, 3);
  const Spatial g = pool_geometry(a, permuted(s, from_channels_last(s.size())));
  Shape o = {s.front()};
  o.insert(o.end(), g.out.begin(), g.out.end());
  o.push_back(s.back());
  out[0].shape = std::move(o);
  return true;
}

bool nhwc_global_pool_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 1);
  require_one_output(n);
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!in[0].shape) return false;
  Shape s = *in[0].shape;
  require_channels_last_rank(n, s, 2);
  for (std::size_t i = 1; i + 1 < s.size(); ++i) s[i] = 1;
  out[0].shape = std::move(s);
  return true;
}

OpSchema xrt_schema(const std::string& op_type, std::string description, InferFn infer) {
  OpSchema d = make_schema(op_type, {DType::kFloat32, DType::kFloat16, DType::kBFloat16},
                           std::move(description), std::move(infer));
  d.domain = "xrt";
  d.foldable = false;
  return d;
}

}  // namespace

void register_nhwc_pool_schemas(std::vector<OpSchema>& s) {
  s.push_back(xrt_schema("NhwcMaxPool",
                         "MaxPool on channels-last [N, D1.., C] (1-3 spatial dimensions, no "
                         "Indices output), created by the compiler's layout pass",
                         nhwc_pool_infer));
  s.push_back(xrt_schema("NhwcAveragePool",
                         "AveragePool on channels-last [N, D1.., C] (1-3 spatial dimensions), "
                         "created by the compiler's layout pass",
                         nhwc_pool_infer));
  for (const std::string t : {"GlobalAveragePool", "GlobalMaxPool"})
    s.push_back(xrt_schema("Nhwc" + t,
                           t + " on channels-last [N, D1.., C] to [N, 1.., C], created by the "
                               "compiler's layout pass",
                           nhwc_global_pool_infer));
}

}  // namespace xpuruntime::ops
