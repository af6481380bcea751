// Schemas of MatMul (numpy semantics: 1-D promotion, broadcast batch dims) and Gemm
// (transA/B, alpha, beta, C). Both dispatch under op key "matmul"; how the GEMM
// itself is described to the matmul kernels is ops/matmul/.
#include "xpuruntime/ops/gemm.h"

#include "ops/families.h"
#include "xpuruntime/error.h"

namespace xpuruntime::ops {
namespace {

// MatMul output shape, with the 1-D promotions recorded.
Shape matmul_shape(const Node& n, Shape a, Shape b) {
  XRT_CHECK(!a.empty() && !b.empty(), InvalidModelError, n.where(),
            ": MatMul inputs must have rank >= 1");
  const bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  XRT_CHECK(a[a.size() - 1] == b[b.size() - 2], InvalidModelError, n.where(),
            ": inner dimensions differ: A is ", graph::shape_str(a), ", B is ", graph::shape_str(b),
            " (A's last dimension must equal B's second to last)");
  Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  Shape batch = broadcast_shapes(n, {ab, bb});
  Shape out = batch;
  if (!a1) out.push_back(a[a.size() - 2]);
  if (!b1) out.push_back(b.back());
  return out;
}

bool matmul_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 2);
  XRT_CHECK(in[0].dtype == in[1].dtype, InvalidModelError, n.where(), ": A is ",
            dtype_name(in[0].dtype), " but B is ", dtype_name(in[1].dtype));
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!in[0].shape || !in[1].shape) return false;
  out[0].shape = matmul_shape(n, *in[0].shape, *in[1].shape);
  return true;
}

bool gemm_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 2);
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!in[0].shape || !in[1].shape) return false;
  const Shape& a = *in[0].shape;
  const Shape& b = *in[1].shape;
  XRT_CHECK(a.size() == 2 && b.size() == 2, InvalidModelError, n.where(),
            ": Gemm inputs must be 2-D, got ", graph::shape_str(a), " and ", graph::shape_str(b));
  const GemmAttrs attrs = GemmAttrs::from_node(n);
  const bool ta = attrs.trans_a, tb = attrs.trans_b;
  const int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1];
  const int64_t kb = tb ? b[1] : b[0], nn = tb ? b[0] : b[1];
  XRT_CHECK(k == kb, InvalidModelError, n.where(), ": inner dimensions differ (", k, " vs ", kb,
            ") for A ", graph::shape_str(a), " and B ", graph::shape_str(b));
  if (in.size() > 2 && in[2].present && in[2].shape) {
    (void)broadcast_shapes(n, {*in[2].shape, Shape{m, nn}});
  }
  out[0].shape = Shape{m, nn};
  return true;
}

}  // namespace

GemmAttrs GemmAttrs::from_node(const Node& n) {
  GemmAttrs a;
  a.trans_a = n.attr_int("transA", 0) != 0;
  a.trans_b = n.attr_int("transB", 0) != 0;
  a.alpha = n.attr_float("alpha", 1.0);
  a.beta = n.attr_float("beta", 1.0);
  return a;
}

void register_gemm_schemas(std::vector<OpSchema>& s) {
  const std::vector<DType> gemm_types = {DType::kFloat32, DType::kFloat64, DType::kFloat16,
                                         DType::kBFloat16};
  s.push_back(make_schema("MatMul", gemm_types,
                          "MatMul through the chosen matmul kernel (numpy broadcasting)",
                          matmul_infer));
  s.push_back(make_schema("Gemm", gemm_types,
                          "Gemm (alpha, beta, transA, transB) through the chosen matmul kernel",
                          gemm_infer));
}

}  // namespace xpuruntime::ops
