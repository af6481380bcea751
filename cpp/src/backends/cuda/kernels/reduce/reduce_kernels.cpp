// Registry kernels of the reductions (ReduceSum/Mean/Max/Min/Prod/L1/L2/
// LogSumExp/SumSquare, axes from the attribute or a constant input, keepdims,
// noop_with_empty_axes), GlobalAveragePool / GlobalMaxPool and CumSum.
// Reduced axes that are not adjacent (after dropping size-1 dims) are moved last
// by a strided copy into the workspace, then reduced as rows.
#include "backends/cuda/kernels/reduce/reduce_kernels.h"

#include <algorithm>

#include "backends/cuda/kernels/common/op_kernel.h"
#include "backends/cuda/kernels/common/shape_cache.h"
#include "backends/cuda/kernels/data/data_impl.h"
#include "backends/cuda/kernels/reduce/reduce_impl.h"
#include "xpuruntime/error.h"

namespace xpuruntime::cuda_ops {
namespace {

struct ReducePlan {
  bool copy_only = false;  // noop_with_empty_axes with no axes: output = input
  bool permute = false;    // reduced axes not adjacent: copy through the workspace first
  CopyIndex to_workspace;  // when permute
  int64_t outer = 1, reduce = 1, inner = 1;
};

ReducePlan make_reduce_plan(const Shape& s, std::vector<int64_t> axes, bool noop_empty,
                            const std::string& what) {
  ReducePlan p;
  const int64_t r = static_cast<int64_t>(s.size());
  if (axes.empty()) {
    if (noop_empty) {
      p.copy_only = true;
      return p;
    }
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  }
  std::vector<bool> red(static_cast<std::size_t>(r), false);
  for (int64_t a : axes) {
    const int64_t n = a < 0 ? a + r : a;
    XRT_CHECK(n >= 0 && n < std::max<int64_t>(r, 1), InvalidModelError, what, ": axis ", a,
              " is out of range for rank ", r);
    if (r > 0) red[static_cast<std::size_t>(n)] = true;
  }
  // Groups of non-trivial dims with the same flag, in order.
  std::vector<std::pair<bool, int64_t>> groups;
  int64_t kept = 1, reduced = 1;
  for (int64_t d = 0; d < r; ++d) {
    const int64_t n = s[static_cast<std::size_t>(d)];
    (red[static_cast<std::size_t>(d)] ? reduced : kept) *= n;
    if (n == 1) continue;
    if (!groups.empty() && groups.back().first == red[static_cast<std::size_t>(d)])
      groups.back().second *= n;
    else
      groups.emplace_back(red[static_cast<std::size_t>(d)], n);
  }
  int reduced_groups = 0;
  for (const auto& g : groups) reduced_groups += g.first ? 1 : 0;
  if (reduced_groups <= 1) {
    bool seen = false;
    for (const auto& [is_red, n] : groups) {
      if (is_red) {
        p.reduce = n;
        seen = true;
      } else {
        (seen ? p.inner : p.outer) *= n;
      }
    }
    if (kept == 0) p.outer = 0;  // an empty output: nothing to launch
    if (reduced == 0) p.reduce = 0;
    return p;
  }
  // Kept dims first (in order), reduced dims last: one strided copy, then rows.
  p.permute = true;
  std::vector<int64_t> order;
  for (int64_t d = 0; d < r; ++d)
    if (!red[static_cast<std::size_t>(d)]) order.push_back(d);
  for (int64_t d = 0; d < r; ++d)
    if (red[static_cast<std::size_t>(d)]) order.push_back(d);
  const std::vector<int64_t> in_strides = dense_strides(s);
  std::vector<int64_t> dims, strides;
  for (int64_t d : order) {
    dims.push_back(s[static_cast<std::size_t>(d)]);
    strides.push_back(in_strides[static_cast<std::size_t>(d)]);
  }
  XRT_CHECK(make_copy_index(dims, strides, dense_strides(dims), 0, 0, p.to_workspace),
            UnsupportedOperationError, what, ": too many dimensions to permute");
  p.outer = kept;
  p.reduce = reduced;
  p.inner = 1;
  return p;
}

std::size_t workspace_for(const ReducePlan& p, const Shape& s, DType t) {
  return p.permute ? static_cast<std::size_t>(graph::shape_numel(s)) * dtype_size(t) : 0;
}

void run_reduce(ReduceOp op, const ReducePlan& p, const KernelArgs& a, const std::string& what) {
  const TensorArg& x = a.inputs[0];
  const TensorArg& y = a.outputs[0];
  const std::size_t es = dtype_size(x.dtype);
  if (p.copy_only) {
    CopyIndex ix;
    make_copy_index({x.numel()}, {1}, {1}, 0, 0, ix);
    launch_copy(es, ix, x.data, y.data, a.stream);
    return;
  }
  const void* src = x.data;
  if (p.permute) {
    XRT_CHECK(a.workspace != nullptr && a.workspace_bytes >= x.nbytes(), InvalidArgumentError, what,
              ": needs ", x.nbytes(), " bytes of workspace to move the reduced axes last, got ",
              a.workspace_bytes);
    launch_copy(es, p.to_workspace, x.data, a.workspace, a.stream);
    src = a.workspace;
  }
  launch_reduce(op, x.dtype, p.outer, p.reduce, p.inner, src, y.data, a.stream);
}

struct ReduceEntry {
  const char* op_type;
  ReduceOp op;
};
const ReduceEntry kReduce[] = {
    {"ReduceSum", ReduceOp::kSum},
    {"ReduceMean", ReduceOp::kMean},
    {"ReduceMax", ReduceOp::kMax},
    {"ReduceMin", ReduceOp::kMin},
    {"ReduceProd", ReduceOp::kProd},
    {"ReduceL1", ReduceOp::kL1},
    {"ReduceL2", ReduceOp::kL2},
    {"ReduceLogSumExp", ReduceOp::kLogSumExp},
    {"ReduceSumSquare", ReduceOp::kSumSquare},
};

void add_reduce(KernelRegistry& r, const ReduceEntry& e) {
  add_kernel(
      r, op_key_of(e.op_type), {},
      std::string(e.op_type) +
          " over any axes (attribute or input), keepdims, noop_with_empty_axes; fp32 "
          "accumulation "
          "for 16-bit floats, int64 for integers",
      [](const OpContext& ctx) {
        return first_refusal({require_arity(ctx, 1), require_dense(ctx),
                              require_dtype(ctx, 0, kNumericTypes, "data"),
                              require_dtype(ctx, 1, {DType::kInt64}, "axes")});
      },
      [e](const PrepareContext& pc) {
        const bool from_attr = pc.node->has("axes");
        const IntsInput axes_in = from_attr ? IntsInput() : IntsInput(pc, 1, "axes");
        const bool noop = pc.node->attr_int("noop_with_empty_axes", 0) != 0;
        const std::string what = where(pc);
        const ReduceOp op = e.op;
        const Shape& in_shape = pc.ctx->inputs[0].shape;
        if (!from_attr && axes_in.present() && !axes_in.constant()) {
          // Axes computed at run time: the plan is made per run; the workspace covers
          // the worst case (a permuted copy of the whole input).
          const std::size_t ws = static_cast<std::size_t>(graph::shape_numel(in_shape)) *
                                 dtype_size(pc.ctx->inputs[0].dtype);
          return make_prepared(
              [op, axes_in, noop, what](const KernelArgs& a) {
                run_reduce(op, make_reduce_plan(a.inputs[0].shape, axes_in.get(a), noop, what), a,
                           what);
              },
              ws);
        }
        const std::vector<int64_t> axes =
            from_attr ? pc.node->attr_ints("axes") : axes_in.get(KernelArgs{});
        ShapeCached<ReducePlan> plan({in_shape}, [axes, noop, what](const std::vector<Shape>& s) {
          return make_reduce_plan(s[0], axes, noop, what);
        });
        const std::size_t ws =
            workspace_for(plan.get({in_shape}), in_shape, pc.ctx->inputs[0].dtype);
        return make_prepared(
            [op, plan, what](const KernelArgs& a) {
              run_reduce(op, plan.get({a.inputs[0].shape}), a, what);
            },
            ws);
      });
}

void add_global_pool(KernelRegistry& r, const char* op_type, ReduceOp op) {
  add_kernel(
      r, op_key_of(op_type), kFloatTypes,
      std::string(op_type) + " over all spatial dims (a row reduction per channel)",
      [](const OpContext& ctx) {
        Support s = first_refusal({require_arity(ctx, 1), require_dense(ctx)});
        if (s.ok && ctx.inputs[0].shape.size() < 2)
          return Support::no(reason::kShapeUnsupported, "input must be [N, C, spatial...]");
        return s;
      },
      [op](const PrepareContext&) {
        return make_prepared([op](const KernelArgs& a) {
          const Shape& s = a.inputs[0].shape;
          const int64_t rows = s[0] * s[1];
          const int64_t spatial = rows > 0 ? a.inputs[0].numel() / rows : 0;
          launch_reduce(op, a.inputs[0].dtype, rows, spatial, 1, a.inputs[0].data,
                        a.outputs[0].data, a.stream);
        });
      });
}

void add_cumsum(KernelRegistry& r) {
  add_kernel(
      r, "cumsum", {},
      "CumSum along one axis (exclusive, reverse); fp32 accumulation for 16-bit floats",
      [](const OpContext& ctx) {
        return first_refusal({require_arity(ctx, 2), require_dense(ctx),
                              require_dtype(ctx, 0, kNumericTypes, "x"),
                              require_dtype(ctx, 1, kIndexTypes, "axis")});
      },
      [](const PrepareContext& pc) {
        const IntsInput axis_in(pc, 1, "axis");
        const bool exclusive = pc.node->attr_int("exclusive", 0) != 0;
        const bool reverse = pc.node->attr_int("reverse", 0) != 0;
        const std::string what = where(pc);
        return make_prepared([axis_in, exclusive, reverse, what](const KernelArgs& a) {
          const std::vector<int64_t> axis_v = axis_in.get(a);
          XRT_CHECK(axis_v.size() == 1, InvalidModelError, what, ": axis must be a scalar, got ",
                    axis_v.size(), " values");
          const int64_t axis_attr = axis_v[0];
          const Shape& s = a.inputs[0].shape;
          const int64_t rank = static_cast<int64_t>(s.size());
          const int64_t axis = axis_attr < 0 ? axis_attr + rank : axis_attr;
          XRT_CHECK(axis >= 0 && axis < rank, InvalidModelError, what, ": axis ", axis_attr,
                    " is out of range for rank ", rank);
          int64_t outer = 1, inner = 1;
          for (int64_t d = 0; d < axis; ++d) outer *= s[static_cast<std::size_t>(d)];
          for (int64_t d = axis + 1; d < rank; ++d) inner *= s[static_cast<std::size_t>(d)];
          launch_cumsum(a.inputs[0].dtype, outer, s[static_cast<std::size_t>(axis)], inner,
                        exclusive, reverse, a.inputs[0].data, a.outputs[0].data, a.stream);
        });
      });
}

}  // namespace

void register_reduce_kernels(KernelRegistry& registry) {
  for (const ReduceEntry& e : kReduce) add_reduce(registry, e);
  add_global_pool(registry, "GlobalAveragePool", ReduceOp::kMean);
  add_global_pool(registry, "GlobalMaxPool", ReduceOp::kMax);
  add_cumsum(registry);
}

}  // namespace xpuruntime::cuda_ops
