// Registry kernels of Softmax ("softmax") and LogSoftmax ("logsoftmax"), opset 13
// axis semantics: normalized along one axis (default -1).
#include "backends/cuda/kernels/softmax/softmax_kernels.h"

#include "backends/cuda/kernels/common/op_kernel.h"
#include "backends/cuda/kernels/softmax/softmax_impl.h"
#include "xpuruntime/error.h"

namespace xpuruntime::cuda_ops {
namespace {

void add_softmax(KernelRegistry& r, const char* op_type, bool log) {
  add_kernel(
      r, op_key_of(op_type), kFloatTypes,
      std::string(op_type) +
          " along one axis (opset 13): warp or block per row, fp32 online max/sum statistics",
      [](const OpContext& ctx) {
        Support s = first_refusal({require_arity(ctx, 1), require_dense(ctx)});
        if (!s.ok) return s;
        const int64_t rank = static_cast<int64_t>(ctx.inputs[0].shape.size());
        const int64_t axis = ctx.attr_int("axis", -1);
        if (axis < -rank || axis >= std::max<int64_t>(rank, 1))
          return Support::no(
              reason::kAttributeUnsupported,
              "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
        return Support::yes();
      },
      [log](const PrepareContext& pc) {
        const int64_t axis_attr = pc.node->attr_int("axis", -1);
        const std::string what = where(pc);
        return make_prepared([log, axis_attr, what](const KernelArgs& a) {
          const Shape& s = a.inputs[0].shape;
          const int64_t rank = static_cast<int64_t>(s.size());
          if (rank == 0) {  // a scalar: softmax 1, log-softmax 0
            launch_softmax(a.inputs[0].dtype, log, 1, 1, 1, a.inputs[0].data, a.outputs[0].data,
                           a.stream);
            return;
          }
          const int64_t axis = axis_attr < 0 ? axis_attr + rank : axis_attr;
          XRT_CHECK(axis >= 0 && axis < rank, InvalidModelError, what, ": axis ", axis_attr,
                    " is out of range for rank ", rank);
          int64_t outer = 1, inner = 1;
          for (int64_t d = 0; d < axis; ++d) outer *= s[static_cast<std::size_t>(d)];
          for (int64_t d = axis + 1; d < rank; ++d) inner *= s[static_cast<std::size_t>(d)];
          launch_softmax(a.inputs[0].dtype, log, outer, s[static_cast<std::size_t>(axis)], inner,
                         a.inputs[0].data, a.outputs[0].data, a.stream);
        });
      });
}

}  // namespace

void register_softmax_kernels(KernelRegistry& registry) {
  add_softmax(registry, "Softmax", false);
  add_softmax(registry, "LogSoftmax", true);
}

}  // namespace xpuruntime::cuda_ops
