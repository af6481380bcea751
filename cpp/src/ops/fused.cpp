// The schema of FusedElementwise (domain "xrt"): a chain of elementwise ops the
// compiler fused into one pass over memory, every input and the output of one float
// dtype (the CPU kernel takes float32; CUDA's float32, float16 and bfloat16). Never
// folded: the compiler creates it after folding.
#include "ops/families.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/elementwise_program.h"

namespace xpuruntime::ops {
namespace {

bool fused_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  // Kernels read every input in one float dtype and input 0 as the accumulator; a node
  // that does not hold that (a crafted model may name this op) is refused here.
  require_inputs(n, in, 1);
  const DType t = in[0].present ? in[0].dtype : DType::kFloat32;
  XRT_CHECK(t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16,
            InvalidModelError, n.where(), ": input 0 is ", dtype_name(t),
            "; a fused elementwise chain takes float32, float16 or bfloat16");
  for (std::size_t i = 0; i < in.size(); ++i)
    XRT_CHECK(in[i].present && in[i].dtype == t, InvalidModelError, n.where(), ": input ", i,
              in[i].present ? " is " + std::string(dtype_name(in[i].dtype)) : " is missing",
              "; every input of a fused elementwise chain has input 0's dtype ", dtype_name(t));
  ElementwiseProgram::from_node(n);  // validates the program (codes, operand indices)
  out[0].present = true;
  out[0].dtype = t;
  if (!all_known(in)) return false;
  std::vector<Shape> shapes;
  for (const Meta& m : in) shapes.push_back(*m.shape);
  out[0].shape = broadcast_shapes(n, shapes);
  return true;
}

}  // namespace

void register_fused_schemas(std::vector<OpSchema>& s) {
  OpSchema d = make_schema(
      "FusedElementwise", {DType::kFloat32, DType::kFloat16, DType::kBFloat16},
      "a chain of elementwise ops fused by the compiler (one pass over memory)", fused_infer);
  d.domain = "xrt";
  d.foldable = false;
  s.push_back(std::move(d));
}

}  // namespace xpuruntime::ops
