// The OpContext of an ONNX MatMul/Gemm node (onnx_matmul.h).
#include "ops/matmul/onnx_matmul.h"

#include <algorithm>

#include "xpuruntime/error.h"

namespace xpuruntime::matmul {

using graph::Shape;
using graph::shape_numel;

void onnx_matmul_context(const graph::Node& n, const std::vector<std::optional<TensorSpec>>& inputs,
                         OpContext& ctx) {
  XRT_CHECK(inputs.size() >= 2 && inputs[0] && inputs[1], UnsupportedOperationError, n.where(),
            ": the shapes of this matmul are only known at run time (they "
            "depend on input values), "
            "so no matmul kernel can be chosen at compile time; the native "
            "engine needs shapes "
            "that follow from the input shapes");
  const TensorSpec& a = *inputs[0];
  const TensorSpec& b = *inputs[1];
  TensorSpec ta = a, tb = b, c;
  c.dtype = a.dtype;
  if (n.op_type == "Gemm") {
    if (n.attr_int("transA", 0) && a.shape.size() == 2) {
      ta.shape = {a.shape[1], a.shape[0]};
      ta.strides = {1, a.shape[1]};
    }
    if (n.attr_int("transB", 0) && b.shape.size() == 2) {
      tb.shape = {b.shape[1], b.shape[0]};
      tb.strides = {1, b.shape[1]};
    }
    c.shape = {ta.shape.empty() ? 0 : ta.shape[0], tb.shape.empty() ? 0 : tb.shape.back()};
  } else {
    Shape as = a.shape, bs = b.shape;
    if (as.size() == 1) as.insert(as.begin(), 1);
    if (bs.size() == 1) bs.push_back(1);
    const int64_t m = as[as.size() - 2], k = as.back(), nn = bs.back();
    Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
    const std::size_t br = std::max(ab.size(), bb.size());
    Shape batch(br, 1);
    for (std::size_t i = 0; i < br; ++i) {
      const int64_t da = i + ab.size() >= br ? ab[i + ab.size() - br] : 1;
      const int64_t db = i + bb.size() >= br ? bb[i + bb.size() - br] : 1;
      batch[i] = std::max(da, db);
    }
    auto padded = [&](const Shape& s) {
      Shape f(br - s.size(), 1);
      f.insert(f.end(), s.begin(), s.end());
      return f;
    };
    const int64_t nb = shape_numel(batch);
    if (shape_numel(bb) == 1) {
      ta.shape = {nb * m, k};
      tb.shape = {k, nn};
      c.shape = {nb * m, nn};
    } else if ((shape_numel(ab) == 1 || padded(ab) == batch) && padded(bb) == batch) {
      Shape x = batch, y = batch, z = batch;
      x.insert(x.end(), {m, k});
      y.insert(y.end(), {k, nn});
      z.insert(z.end(), {m, nn});
      ta.shape = shape_numel(ab) == 1 ? Shape{m, k} : x;
      tb.shape = y;
      c.shape = z;
    } else {
      ta.shape = {m, k};
      tb.shape = {k, nn};
      c.shape = {m, nn};
    }
    ta.strides.clear();
    tb.strides.clear();
  }
  ctx.inputs = {ta, tb};
  // A bias the epilogue fusion folded into a MatMul is the GEMM's bias row.
  if (n.op_type == "MatMul" && n.attr_int("_bias", 0) && inputs.size() > 2 && inputs[2]) {
    TensorSpec bias = *inputs[2];
    bias.shape = {shape_numel(bias.shape)};
    bias.strides.clear();
    ctx.inputs.push_back(bias);
  }
  ctx.outputs = {c};
}

}  // namespace xpuruntime::matmul
