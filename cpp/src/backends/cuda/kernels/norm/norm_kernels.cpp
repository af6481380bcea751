// Registry kernel of InstanceNormalization (wav2vec2's feature encoder): float
// dtypes, fp32 statistics for the 16-bit floats and fp32, fp64 for fp64.
#include "backends/cuda/kernels/norm/norm_kernels.h"

#include "backends/cuda/kernels/common/op_kernel.h"
#include "backends/cuda/kernels/norm/norm_impl.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/classify.h"

namespace xpuruntime::cuda_ops {
namespace {

void add_instance_norm(KernelRegistry& r) {
  add_kernel(
      r, "instancenormalization", kFloatTypes,
      "InstanceNormalization (one block per batch x channel row, two-pass fp32 "
      "statistics)",
      [](const OpContext& ctx) {
        Support s = first_refusal({require_arity(ctx, 3), require_dense(ctx),
                                   require_dtype(ctx, 0, kFloatTypes, "input")});
        if (!s.ok) return s;
        const std::vector<DType> same = {ctx.inputs[0].dtype};
        s = first_refusal({require_dtype(ctx, 1, same, "scale"), require_dtype(ctx, 2, same, "B")});
        if (s.ok && ctx.inputs[0].shape.size() < 2)
          return Support::no(reason::kShapeUnsupported,
                             "InstanceNormalization needs an input of rank >= 2 (N, C, ...)");
        return s;
      },
      [](const PrepareContext& pc) {
        const double eps = ops::InstanceNormAttrs::from_node(*pc.node).epsilon;
        const std::string what = where(pc);
        return make_prepared([eps, what](const KernelArgs& a) {
          const Shape& s = a.inputs[0].shape;
          XRT_CHECK(s.size() >= 2, InvalidArgumentError, what, ": input ", graph::shape_str(s),
                    " must have rank >= 2 (N, C, ...)");
          const int64_t batch = s[0], channels = s[1];
          XRT_CHECK(a.inputs[1].numel() == channels && a.inputs[2].numel() == channels,
                    InvalidArgumentError, what, ": scale and B must have ", channels,
                    " elements (the input's channels), got ", a.inputs[1].numel(), " and ",
                    a.inputs[2].numel());
          const int64_t rows = batch * channels;
          const int64_t inner = rows > 0 ? a.inputs[0].numel() / rows : 0;
          launch_instance_norm(a.inputs[0].dtype, a.inputs[0].data, a.inputs[1].data,
                               a.inputs[2].data, a.outputs[0].data, batch, channels, inner, eps,
                               a.stream);
        });
      });
}

}  // namespace

void register_norm_kernels(KernelRegistry& registry) { add_instance_norm(registry); }

}  // namespace xpuruntime::cuda_ops
