// The schema of FusedElementwise (domain "xrt"): a chain of elementwise ops the
// compiler fused into one pass over memory (float32). Never folded: the compiler
// creates it after folding.
#include "ops/families.h"

namespace xpuruntime::ops {
namespace {

bool fused_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  out[0].present = true;
  out[0].dtype = DType::kFloat32;
  if (!all_known(in)) return false;
  std::vector<Shape> shapes;
  for (const Meta& m : in) shapes.push_back(*m.shape);
  out[0].shape = broadcast_shapes(n, shapes);
  return true;
}

}  // namespace

void register_fused_schemas(std::vector<OpSchema>& s) {
  OpSchema d = make_schema(
      "FusedElementwise", {DType::kFloat32},
      "a chain of elementwise ops fused by the compiler (one pass over memory)", fused_infer);
  d.domain = "xrt";
  d.foldable = false;
  s.push_back(std::move(d));
}

}  // namespace xpuruntime::ops
