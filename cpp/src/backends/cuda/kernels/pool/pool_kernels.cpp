// Registry kernels of MaxPool, AveragePool (window geometry from the device-neutral
// ops::pool_geometry, the rules the CPU kernels and shape inference use) and
// inference BatchNormalization.
#include "backends/cuda/kernels/pool/pool_kernels.h"

#include <algorithm>

#include "backends/cuda/kernels/common/op_kernel.h"
#include "backends/cuda/kernels/common/shape_cache.h"
#include "backends/cuda/kernels/pool/pool_impl.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/spatial.h"

namespace xpuruntime::cuda_ops {
namespace {

const std::vector<DType> kPoolTypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                                       DType::kFloat64, DType::kInt8,    DType::kUInt8};

PoolGeometry geometry_of(const ops::PoolAttrs& a, const Shape& x) {
  const ops::Spatial sp = ops::pool_geometry(a, x);
  PoolGeometry g;
  g.planes = x[0] * x[1];
  const int off = 3 - static_cast<int>(sp.rank());
  for (int i = 0; i < static_cast<int>(sp.rank()); ++i) {
    g.in[off + i] = sp.in[i];
    g.out[off + i] = sp.out[i];
    g.k[off + i] = sp.k[i];
    g.s[off + i] = sp.s[i];
    g.d[off + i] = sp.d[i];
    g.pb[off + i] = sp.pb[i];
    g.pe[off + i] = sp.pe[i];
  }
  return g;
}

void add_pool(KernelRegistry& r, const char* op_type, bool is_max) {
  add_kernel(
      r, op_key_of(op_type), kPoolTypes,
      std::string(op_type) + " over 1-3 spatial dims (one thread per output; " +
          (is_max ? "no Indices output)" : "count_include_pad)"),
      [is_max](const OpContext& ctx) {
        Support s = first_refusal({require_arity(ctx, 1), require_dense(ctx)});
        if (!s.ok) return s;
        const std::size_t rank = ctx.inputs[0].shape.size();
        if (rank < 3 || rank > 5)
          return Support::no(reason::kShapeUnsupported,
                             "input rank " + std::to_string(rank) + " is not 3-5");
        if (is_max && ctx.outputs.size() > 1)
          return Support::no(reason::kAttributeUnsupported,
                             "MaxPool's Indices output has no CUDA kernel");
        if (!is_max && ctx.inputs[0].dtype != DType::kFloat32 &&
            ctx.inputs[0].dtype != DType::kFloat16 && ctx.inputs[0].dtype != DType::kBFloat16 &&
            ctx.inputs[0].dtype != DType::kFloat64)
          return Support::no(reason::kDtypeUnsupported, "AveragePool takes float dtypes");
        return Support::yes();
      },
      [is_max](const PrepareContext& pc) {
        const ops::PoolAttrs attrs = ops::PoolAttrs::from_node(*pc.node);
        ShapeCached<PoolGeometry> plan(
            {pc.ctx->inputs[0].shape},
            [attrs](const std::vector<Shape>& s) { return geometry_of(attrs, s[0]); });
        const bool include_pad = attrs.count_include_pad;
        return make_prepared([plan, is_max, include_pad](const KernelArgs& a) {
          launch_pool(a.inputs[0].dtype, is_max, include_pad, plan.get({a.inputs[0].shape}),
                      a.inputs[0].data, a.outputs[0].data, a.stream);
        });
      });
}

// [N, D1.., C] as the logical [N, C, D1..] the geometry rules take.
Shape logical_of(const Shape& x) {
  Shape r = {x[0], x.back()};
  r.insert(r.end(), x.begin() + 1, x.end() - 1);
  return r;
}

Support nhwc_pool_supports(const OpContext& ctx, std::size_t min_rank) {
  // The layout pass asks before the node has an output value.
  Support s = first_refusal(
      {require_arity(ctx, 1, ctx.outputs.empty() ? 0 : 1), require_dense(ctx),
       require_dtype(ctx, 0, {DType::kFloat32, DType::kFloat16, DType::kBFloat16}, "X")});
  if (!s.ok) return s;
  const std::size_t rank = ctx.inputs[0].shape.size();
  if (rank < min_rank || rank > 5)
    return Support::no(reason::kShapeUnsupported, "input rank " + std::to_string(rank) +
                                                      " is not " + std::to_string(min_rank) +
                                                      "-5");
  if (ctx.outputs.size() > 1)
    return Support::no(reason::kAttributeUnsupported, "a channels-last pool has one output");
  return Support::yes();
}

void add_nhwc_pool(KernelRegistry& r, const char* op_type, bool is_max) {
  add_kernel(
      r, op_key_of(op_type), {DType::kFloat32, DType::kFloat16, DType::kBFloat16},
      std::string(op_type) +
          " on channels-last [N, D1.., C] (1-3 spatial dims; a thread per output pixel and "
          "channel vector)",
      [](const OpContext& ctx) { return nhwc_pool_supports(ctx, 3); },
      [is_max](const PrepareContext& pc) {
        const ops::PoolAttrs attrs = ops::PoolAttrs::from_node(*pc.node);
        ShapeCached<PoolGeometry> plan({pc.ctx->inputs[0].shape},
                                       [attrs](const std::vector<Shape>& s) {
                                         PoolGeometry g = geometry_of(attrs, logical_of(s[0]));
                                         g.planes = s[0][0];
                                         return g;
                                       });
        const bool include_pad = attrs.count_include_pad;
        return make_prepared([plan, is_max, include_pad](const KernelArgs& a) {
          const Shape& x = a.inputs[0].shape;
          launch_nhwc_pool(a.inputs[0].dtype, is_max, include_pad, plan.get({x}), x.back(),
                           a.inputs[0].data, a.outputs[0].data, a.stream);
        });
      });
}

void add_nhwc_global_pool(KernelRegistry& r, const char* op_type, bool is_max) {
  add_kernel(
      r, op_key_of(op_type), {DType::kFloat32, DType::kFloat16, DType::kBFloat16},
      std::string(op_type) +
          " on channels-last [N, D1.., C] (a block per image, 32 channel vectors and pixel "
          "chunk, lanes reduced in shared memory, chunks merged in order)",
      [](const OpContext& ctx) { return nhwc_pool_supports(ctx, 2); },
      [is_max](const PrepareContext& pc) {
        auto pixels_of = [](const Shape& x) {
          int64_t pixels = 1;
          for (std::size_t i = 1; i + 1 < x.size(); ++i) pixels *= x[i];
          return pixels;
        };
        // Pixel-chunk partials for the shape known now (a larger run shape reduces in
        // one pass).
        const Shape& x0 = pc.ctx->inputs[0].shape;
        const bool known = std::all_of(x0.begin(), x0.end(), [](int64_t d) { return d > 0; });
        const std::size_t ws =
            known ? nhwc_global_pool_workspace_bytes(x0[0], pixels_of(x0), x0.back()) : 0;
        return make_prepared(
            [is_max, pixels_of](const KernelArgs& a) {
              const Shape& x = a.inputs[0].shape;
              launch_nhwc_global_pool(a.inputs[0].dtype, is_max, x[0], pixels_of(x), x.back(),
                                      a.inputs[0].data, a.outputs[0].data, a.workspace,
                                      a.workspace_bytes, a.stream);
            },
            ws);
      });
}

void add_batchnorm(KernelRegistry& r) {
  add_kernel(
      r, "batchnormalization", kFloatTypes,
      "BatchNormalization, inference form (running statistics), per channel of dim 1",
      [](const OpContext& ctx) {
        Support s = first_refusal({require_arity(ctx, 5), require_dense(ctx)});
        if (!s.ok) return s;
        if (ctx.attr_int("training_mode", 0) != 0 || ctx.outputs.size() > 1)
          return Support::no(reason::kAttributeUnsupported,
                             "training-mode BatchNormalization has no CUDA kernel");
        if (ctx.inputs[0].shape.size() < 2)
          return Support::no(reason::kShapeUnsupported, "input must be [N, C, ...]");
        for (std::size_t i = 1; i < 5; ++i)
          if (ctx.inputs[i].dtype != ctx.inputs[0].dtype)
            return Support::no(reason::kDtypeUnsupported,
                               "scale, bias, mean and var must have X's dtype (input " +
                                   std::to_string(i) + " is " +
                                   std::string(dtype_name(ctx.inputs[i].dtype)) + ")");
        return Support::yes();
      },
      [](const PrepareContext& pc) {
        const double eps = pc.node->attr_float("epsilon", 1e-5);
        return make_prepared([eps](const KernelArgs& a) {
          const Shape& s = a.inputs[0].shape;
          const int64_t n = s[0], c = s[1];
          const int64_t inner = n * c > 0 ? a.inputs[0].numel() / (n * c) : 0;
          launch_batchnorm(a.inputs[0].dtype, n, c, inner, a.inputs[0].data, a.inputs[1].data,
                           a.inputs[2].data, a.inputs[3].data, a.inputs[4].data, eps,
                           a.outputs[0].data, a.stream);
        });
      });
}

}  // namespace

void register_pool_kernels(KernelRegistry& registry) {
  add_pool(registry, "MaxPool", true);
  add_pool(registry, "AveragePool", false);
  add_batchnorm(registry);
  add_nhwc_pool(registry, "NhwcMaxPool", true);
  add_nhwc_pool(registry, "NhwcAveragePool", false);
  add_nhwc_global_pool(registry, "NhwcGlobalMaxPool", true);
  add_nhwc_global_pool(registry, "NhwcGlobalAveragePool", false);
}

}  // namespace xpuruntime::cuda_ops
