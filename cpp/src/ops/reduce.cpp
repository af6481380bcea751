// Schemas of the reductions ReduceSum/Mean/Max/Min/Prod/SumSquare/L1/L2/LogSumExp:
// axes from the attribute (older opsets) or input 1 (ReduceSum >= 13, others >= 18).
#include "ops/families.h"
#include "xpuruntime/ops/shape_rules.h"

namespace xpuruntime::ops {
namespace {

bool reduce_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 1);
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!in[0].shape) return false;
  std::vector<int64_t> axes;
  bool noop = false;
  const ReduceAttrs attrs = ReduceAttrs::from_node(n);
  if (!reduce_axes(attrs, in, in[0].rank(), axes, noop)) return false;
  out[0].shape = noop ? *in[0].shape : reduced_shape(*in[0].shape, axes, attrs.keepdims);
  return true;
}

}  // namespace

void register_reduce_schemas(std::vector<OpSchema>& s) {
  for (const std::string t : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                              "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp"}) {
    std::vector<DType> dtypes = {DType::kFloat32,  DType::kFloat64, DType::kFloat16,
                                 DType::kBFloat16, DType::kInt64,   DType::kInt32,
                                 DType::kInt8,     DType::kUInt8};
    if (t == "ReduceMax" || t == "ReduceMin") dtypes.push_back(DType::kBool);
    s.push_back(make_schema(t, std::move(dtypes), t + " over any set of axes", reduce_infer));
  }
}

}  // namespace xpuruntime::ops
