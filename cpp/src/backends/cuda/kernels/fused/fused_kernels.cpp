// The FusedElementwise ("fusedelementwise") CUDA kernel: prepare() reads the
// node's program, generates its source and compiles it with NVRTC (or loads the
// cubin from the disk cache); run() fills FusedArgs (broadcast plan cached for the
// prepared shapes) and launches it.
#include "backends/cuda/kernels/fused/fused_kernels.h"

#include <algorithm>

#include "backends/cuda/kernels/common/broadcast.h"
#include "backends/cuda/kernels/common/op_kernel.h"
#include "backends/cuda/kernels/common/shape_cache.h"
#include "backends/cuda/kernels/fused/fused_codegen.h"
#include "backends/cuda/kernels/nvrtc/nvrtc_module.h"
#include "xpuruntime/error.h"

namespace xpuruntime::cuda_ops {
namespace {

struct FusedPlan {
  int64_t numel = 0;
  int32_t rank = 0;
  bool all_dense = true;
  int64_t dims[kFusedMaxRank] = {};
  int64_t strides[kFusedMaxInputs][kFusedMaxRank] = {};
};

// The numpy broadcast of every input onto the output, size-1 dims dropped and
// adjacent dims merged where every input walks them contiguously (StridedIndex
// holds at most three operands; a fused chain has up to 16).
FusedPlan fused_plan(const std::vector<Shape>& shapes, const std::string& what) {
  // shapes: inputs..., output last.
  const Shape& out = shapes.back();
  const std::size_t n = shapes.size() - 1;
  FusedPlan p;
  p.numel = graph::shape_numel(out);
  const std::size_t r = out.size();
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> st(n);
  for (std::size_t d = 0; d < r; ++d) {
    if (out[d] == 1) continue;
    dims.push_back(out[d]);
    for (std::size_t k = 0; k < n; ++k) {
      const Shape& in = shapes[k];
      const std::size_t off = r - in.size();
      int64_t stride = 0;
      if (d >= off && in[d - off] != 1) {
        stride = 1;
        for (std::size_t e = d - off + 1; e < in.size(); ++e) stride *= in[e];
      }
      st[k].push_back(stride);
    }
  }
  // Merge adjacent dims every input walks contiguously.
  std::vector<int64_t> cd;
  std::vector<std::vector<int64_t>> cs(n);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    bool merge = !cd.empty();
    for (std::size_t k = 0; merge && k < n; ++k) merge = cs[k].back() == st[k][i] * dims[i];
    if (merge) {
      cd.back() *= dims[i];
      for (std::size_t k = 0; k < n; ++k) cs[k].back() = st[k][i];
    } else {
      cd.push_back(dims[i]);
      for (std::size_t k = 0; k < n; ++k) cs[k].push_back(st[k][i]);
    }
  }
  XRT_CHECK(cd.size() <= static_cast<std::size_t>(kFusedMaxRank), UnsupportedOperationError, what,
            ": the broadcast needs more than ", kFusedMaxRank, " dimensions after collapsing");
  p.rank = static_cast<int32_t>(cd.size());
  for (std::size_t k = 0; k < n; ++k)
    p.all_dense = p.all_dense && graph::shape_numel(shapes[k]) == p.numel;
  for (std::size_t d = 0; d < cd.size(); ++d) {
    p.dims[d] = cd[d];
    for (std::size_t k = 0; k < n; ++k) p.strides[k][d] = cs[k][d];
  }
  return p;
}

}  // namespace

void register_fused_kernels(KernelRegistry& registry) {
  add_kernel(
      registry, "fusedelementwise", {DType::kFloat32, DType::kFloat16, DType::kBFloat16},
      "FusedElementwise chain compiled to one kernel with NVRTC (cubin cached on disk by "
      "program, dtype, GPU architecture and NVRTC version); numpy broadcasting of up to 16 "
      "inputs of one float dtype, fp32 arithmetic, one rounding at the store",
      [](const OpContext& ctx) {
        Support s = first_refusal({require_arity(ctx, 1), require_dense(ctx)});
        if (!s.ok) return s;
        const DType t = ctx.outputs[0].dtype;
        for (const TensorSpec& in : ctx.inputs)
          if (in.dtype != t)
            return Support::no(reason::kDtypeUnsupported,
                               std::string("every input must have the output's dtype ") +
                                   std::string(dtype_name(t)) + " (an input is " +
                                   std::string(dtype_name(in.dtype)) + ")");
        if (ctx.inputs.size() > static_cast<std::size_t>(kFusedMaxInputs))
          return Support::no(reason::kShapeUnsupported, std::to_string(ctx.inputs.size()) +
                                                            " inputs (at most " +
                                                            std::to_string(kFusedMaxInputs) + ")");
        return Support::yes();
      },
      [](const PrepareContext& pc) {
        const ops::ElementwiseProgram program = ops::ElementwiseProgram::from_node(*pc.node);
        const int inputs = static_cast<int>(pc.ctx->inputs.size());
        const std::string what = where(pc);
        std::shared_ptr<const NvrtcModule> module =
            NvrtcModule::compile("fused_" + pc.ctx->node,
                                 fused_source(program, inputs, pc.ctx->outputs[0].dtype),
                                 {"--std=c++17"}, {"xrt_fused"});
        std::vector<Shape> shapes;
        for (const TensorSpec& t : pc.ctx->inputs) shapes.push_back(t.shape);
        shapes.push_back(pc.ctx->outputs[0].shape);
        ShapeCached<FusedPlan> plan(
            shapes, [what](const std::vector<Shape>& s) { return fused_plan(s, what); });
        return make_prepared([module, plan](const KernelArgs& a) {
          std::vector<Shape> s;
          for (const TensorArg& t : a.inputs) s.push_back(t.shape);
          s.push_back(a.outputs[0].shape);
          const FusedPlan p = plan.get(s);
          if (p.numel == 0) return;
          FusedArgs args;
          for (std::size_t k = 0; k < a.inputs.size(); ++k)
            args.in[k] = a.inputs[k].data;
          args.out = a.outputs[0].data;
          args.numel = p.numel;
          args.rank = p.rank;
          args.all_dense = p.all_dense ? 1 : 0;
          for (int d = 0; d < kFusedMaxRank; ++d) {
            args.dims[d] = p.dims[d];
            for (int k = 0; k < kFusedMaxInputs; ++k) args.strides[k][d] = p.strides[k][d];
          }
          LaunchDims dims;
          dims.block[0] = 256;
          const int64_t blocks = std::min<int64_t>((p.numel + 255) / 256, 8192);
          dims.grid[0] = static_cast<unsigned>(blocks);
          void* params[] = {&args};
          module->launch("xrt_fused", dims, params, a.stream);
        });
      });
}

}  // namespace xpuruntime::cuda_ops
