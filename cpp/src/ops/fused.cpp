// The schema of FusedElementwise (domain "xrt"): a chain of elementwise ops the
// compiler fused into one pass over memory (float32). Never folded: the compiler
// creates it after folding.
#include "ops/families.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/elementwise_program.h"

namespace xpuruntime::ops {
namespace {

bool fused_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  // The CPU kernel reads every input as float32 and input 0 as the accumulator; a
  // node that does not hold that (a crafted model may name this op) is refused here.
  require_inputs(n, in, 1);
  for (std::size_t i = 0; i < in.size(); ++i)
    XRT_CHECK(in[i].present && in[i].dtype == DType::kFloat32, InvalidModelError, n.where(),
              ": input ", i,
              in[i].present ? " is " + std::string(dtype_name(in[i].dtype)) : " is missing",
              "; a fused elementwise chain takes float32 inputs only");
  ElementwiseProgram::from_node(n);  // validates the program (codes, operand indices)
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
