// Registry kernel of InstanceNormalization (wav2vec2's feature encoder): float
// dtypes, fp32 statistics for the 16-bit floats and fp32, fp64 for fp64.
#include "backends/cuda/kernels/norm/norm_kernels.h"

#include <algorithm>

#include "backends/cuda/kernels/common/op_kernel.h"
#include "backends/cuda/kernels/norm/norm_impl.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/classify.h"
#include "xpuruntime/ops/nn.h"
#include "xpuruntime/ops/op_schema.h"

namespace xpuruntime::cuda_ops {
namespace {

void add_instance_norm(KernelRegistry& r) {
  add_kernel(
      r, "instancenormalization", kFloatTypes,
      "InstanceNormalization (one block per batch x channel row, or chunks of few long rows "
      "merged in a fixed order; two-pass fp32 statistics)",
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
        // The chunk statistics of few long rows (launch_instance_norm): sized for the
        // shape known now; a run of other shapes that needs more uses one block per row.
        std::size_t ws = 0;
        const Shape& s0 = pc.ctx->inputs[0].shape;
        if (s0.size() >= 2 && std::all_of(s0.begin(), s0.end(), [](int64_t d) { return d > 0; }))
          ws = instance_norm_workspace_bytes(pc.ctx->inputs[0].dtype, s0[0] * s0[1],
                                             graph::shape_numel(s0) / (s0[0] * s0[1]));
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
                               a.workspace, a.workspace_bytes, a.stream);
        }, ws);
      });
}

void add_rms_norm(KernelRegistry& r) {
  add_kernel(
      r, "rmsnormalization", {DType::kFloat32, DType::kFloat16, DType::kBFloat16},
      "RMSNormalization (one block per row, fp32 statistics, 16-byte vectors)",
      [](const OpContext& ctx) {
        Support s = first_refusal(
            {require_arity(ctx, 2), require_dense(ctx),
             require_dtype(ctx, 0, {DType::kFloat32, DType::kFloat16, DType::kBFloat16}, "X")});
        if (!s.ok) return s;
        s = require_dtype(ctx, 1, {ctx.inputs[0].dtype}, "scale");
        if (s.ok && ctx.outputs.size() > 1)
          return Support::no(reason::kAttributeUnsupported, "RMSNormalization has one output");
        return s;
      },
      [](const PrepareContext& pc) {
        const ops::LayerNormAttrs attrs = ops::LayerNormAttrs::from_node(*pc.node);
        const std::string what = where(pc);
        const graph::Node node = *pc.node;
        return make_prepared([attrs, what, node](const KernelArgs& a) {
          const Shape& s = a.inputs[0].shape;
          const int64_t rank = static_cast<int64_t>(s.size());
          const int64_t axis = ops::norm_axis(node, attrs.axis, rank);
          int64_t rows = 1, len = 1;
          for (int64_t i = 0; i < axis; ++i) rows *= s[i];
          for (int64_t i = axis; i < rank; ++i) len *= s[i];
          const int64_t sn = a.inputs[1].numel();
          XRT_CHECK(sn == len || (sn > 0 && len % sn == 0), InvalidArgumentError, what,
                    ": scale has ", sn, " elements but the normalized shape has ", len);
          launch_rms_norm(a.inputs[0].dtype, a.inputs[0].data, a.inputs[1].data,
                          a.outputs[0].data, rows, len, sn, attrs.epsilon, a.stream);
        });
      });
}

}  // namespace

void register_norm_kernels(KernelRegistry& registry) {
  add_instance_norm(registry);
  add_rms_norm(registry);
}

}  // namespace xpuruntime::cuda_ops
