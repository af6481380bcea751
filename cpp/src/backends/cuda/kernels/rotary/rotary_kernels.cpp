// Registry kernel of RotaryHalf (the compiler's fused rotary embedding, domain
// xrt).
#include "backends/cuda/kernels/rotary/rotary_kernels.h"

#include "backends/cuda/kernels/common/op_kernel.h"
#include "backends/cuda/kernels/common/shape_cache.h"
#include "backends/cuda/kernels/rotary/rotary_impl.h"
#include "xpuruntime/error.h"

namespace xpuruntime::cuda_ops {

void register_rotary_kernels(KernelRegistry &registry) {
  const std::vector<DType> types = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  add_kernel(
      registry, "rotaryhalf", types,
      "RotaryHalf: x * cos + rotate_half(x) * sin in one pass (cos/sin "
      "broadcast)",
      [types](const OpContext &ctx) {
        Support s = first_refusal(
            {require_arity(ctx, 3), require_dense(ctx), require_dtype(ctx, 0, types, "x")});
        if (!s.ok) return s;
        const std::vector<DType> same = {ctx.inputs[0].dtype};
        return first_refusal(
            {require_dtype(ctx, 1, same, "cos"), require_dtype(ctx, 2, same, "sin")});
      },
      [](const PrepareContext &pc) {
        const std::string what = where(pc);
        ShapeCached<StridedIndex> plan(
            {pc.ctx->inputs[0].shape, pc.ctx->inputs[1].shape, pc.ctx->inputs[2].shape},
            [what](const std::vector<Shape> &s) {
              StridedIndex ix;
              XRT_CHECK(make_broadcast_index(s[0], {s[0], s[1], s[2]}, ix),
                        UnsupportedOperationError, what, ": x ", graph::shape_str(s[0]),
                        " has more than ", kMaxRank, " dimensions after collapsing");
              return ix;
            });
        return make_prepared([plan](const KernelArgs &a) {
          const Shape &x = a.inputs[0].shape;
          launch_rotary_half(a.inputs[0].dtype, plan.get({x, a.inputs[1].shape, a.inputs[2].shape}),
                             x.back(), a.inputs[0].data, a.inputs[1].data, a.inputs[2].data,
                             a.outputs[0].data, a.stream);
        });
      });
}

}  // namespace xpuruntime::cuda_ops
