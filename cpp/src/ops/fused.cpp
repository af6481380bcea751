// The schemas of FusedElementwise and RotaryHalf (domain "xrt"). FusedElementwise: a
// chain of elementwise ops the compiler fused into one pass over memory, every input
// and the output of one float dtype (the CPU kernel takes float32; CUDA's float32,
// float16 and bfloat16). Never folded: the compiler creates both after folding.
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

// RotaryHalf: y = x * cos + rotate_half(x) * sin, rotate_half(x) = concat(-x[..., D/2:],
// x[..., :D/2]) along the last axis (the GPT-NeoX / Llama form of rotary position
// embeddings). cos and sin broadcast to x (numpy rules) and have x's last dimension; the
// output is x's shape. One float dtype.
bool rotary_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 3);
  const DType t = in[0].dtype;
  for (std::size_t i = 1; i < 3; ++i)
    XRT_CHECK(in[i].dtype == t, InvalidModelError, n.where(), ": input ", i, " is ",
              dtype_name(in[i].dtype), ", x is ", dtype_name(t), "; RotaryHalf takes one dtype");
  out[0].present = true;
  out[0].dtype = t;
  if (!all_known(in)) return false;
  const Shape& x = *in[0].shape;
  XRT_CHECK(!x.empty() && x.back() % 2 == 0, InvalidModelError, n.where(), ": x ",
            graph::shape_str(x), " must have an even last dimension");
  for (std::size_t i = 1; i < 3; ++i) {
    const Shape& c = *in[i].shape;
    XRT_CHECK(!c.empty() && c.back() == x.back() && c.size() <= x.size(), InvalidModelError,
              n.where(), ": input ", i, " ", graph::shape_str(c), " must have x's last dimension ",
              x.back(), " and no higher rank");
  }
  const Shape b = broadcast_shapes(n, {x, *in[1].shape, *in[2].shape});
  XRT_CHECK(b == x, InvalidModelError, n.where(), ": cos and sin must broadcast to x ",
            graph::shape_str(x), ", not widen it to ", graph::shape_str(b));
  out[0].shape = x;
  return true;
}

}  // namespace

void register_fused_schemas(std::vector<OpSchema>& s) {
  OpSchema r = make_schema(
      "RotaryHalf", {DType::kFloat32, DType::kFloat16, DType::kBFloat16},
      "x * cos + rotate_half(x) * sin (rotary position embedding, half rotation), fused by the "
      "compiler from Slice, Neg, Concat, Mul and Add",
      rotary_infer);
  r.domain = "xrt";
  r.foldable = false;
  s.push_back(std::move(r));
  OpSchema d = make_schema(
      "FusedElementwise", {DType::kFloat32, DType::kFloat16, DType::kBFloat16},
      "a chain of elementwise ops fused by the compiler (one pass over memory)", fused_infer);
  d.domain = "xrt";
  d.foldable = false;
  s.push_back(std::move(d));
}

}  // namespace xpuruntime::ops
