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
  // The vector kernels' arguments (pointers unset) for each group width the shapes
  // allow, widest first; a run takes the first its pointers' alignment allows.
  int vector_count = 0;
  int widths[3] = {};
  FusedVecArgs vector[3];
};

// Whether the vector kernels can run this plan with groups of v elements: the
// innermost dim a multiple of v and every offset inside 32 bits.
bool vector_fits(const FusedPlan& p, const std::vector<Shape>& shapes, int v) {
  if (p.rank == 0 || p.dims[p.rank - 1] % v != 0 || p.numel / v >= (int64_t{1} << 31)) return false;
  for (std::size_t k = 0; k + 1 < shapes.size(); ++k)
    if (graph::shape_numel(shapes[k]) >= (int64_t{1} << 31)) return false;
  return true;
}

FusedVecArgs vector_args(const FusedPlan& p, std::size_t inputs, int v) {
  FusedVecArgs a;
  a.nvec = static_cast<uint32_t>(p.numel / v);
  a.rank = p.rank;
  for (int d = 0; d < p.rank; ++d) {
    const bool inner = d == p.rank - 1;
    const FastDivisor f =
        make_fast_divisor(static_cast<uint32_t>(inner ? p.dims[d] / v : p.dims[d]));
    a.div[d] = f.divisor;
    a.mul[d] = f.magic;
    a.shr[d] = f.shift;
    for (std::size_t k = 0; k < inputs; ++k)
      a.strides[k][d] = static_cast<uint32_t>(inner ? p.strides[k][d] * v : p.strides[k][d]);
  }
  for (std::size_t k = 0; k < inputs; ++k)
    if (p.strides[k][p.rank - 1] == 1) a.dense_mask |= 1u << k;
  return a;
}

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

// Launches the widest vector kernel whose alignment the run's pointers meet; false
// when none applies (the general kernel runs).
bool launch_vector(const NvrtcModule& module, const FusedPlan& p, const KernelArgs& a,
                   std::size_t elem) {
  for (int w = 0; w < p.vector_count; ++w) {
    const int v = p.widths[w];
    const std::size_t align = elem * static_cast<std::size_t>(v);
    bool aligned = reinterpret_cast<uintptr_t>(a.outputs[0].data) % align == 0;
    for (std::size_t k = 0; aligned && k < a.inputs.size(); ++k)
      aligned = p.strides[k][p.rank - 1] != 1 ||
                reinterpret_cast<uintptr_t>(a.inputs[k].data) % align == 0;
    if (!aligned) continue;
    FusedVecArgs args = p.vector[w];
    for (std::size_t k = 0; k < a.inputs.size(); ++k) args.in[k] = a.inputs[k].data;
    args.out = a.outputs[0].data;
    LaunchDims dims;
    dims.block[0] = 256;
    dims.grid[0] = static_cast<unsigned>(std::min<int64_t>((args.nvec + 255) / 256, 8192));
    void* params[] = {&args};
    module.launch(fused_vector_kernel(v), dims, params, a.stream);
    return true;
  }
  return false;
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
        const DType dtype = pc.ctx->outputs[0].dtype;
        const std::vector<int> widths = fused_vector_widths(dtype);
        std::vector<std::string> kernels = {"xrt_fused"};
        for (int v : widths) kernels.push_back(fused_vector_kernel(v));
        std::shared_ptr<const NvrtcModule> module =
            NvrtcModule::compile("fused_" + pc.ctx->node, fused_source(program, inputs, dtype),
                                 {"--std=c++17"}, kernels);
        std::vector<Shape> shapes;
        for (const TensorSpec& t : pc.ctx->inputs) shapes.push_back(t.shape);
        shapes.push_back(pc.ctx->outputs[0].shape);
        ShapeCached<FusedPlan> plan(shapes, [what, widths](const std::vector<Shape>& s) {
          FusedPlan p = fused_plan(s, what);
          for (int v : widths) {
            if (!vector_fits(p, s, v) || p.vector_count == 3) continue;
            p.widths[p.vector_count] = v;
            p.vector[p.vector_count++] = vector_args(p, s.size() - 1, v);
          }
          return p;
        });
        const std::size_t elem = dtype_size(dtype);
        return make_prepared([module, plan, elem](const KernelArgs& a) {
          std::vector<Shape> s;
          for (const TensorArg& t : a.inputs) s.push_back(t.shape);
          s.push_back(a.outputs[0].shape);
          const FusedPlan p = plan.get(s);
          if (p.numel == 0) return;
          if (launch_vector(*module, p, a, elem)) return;
          FusedArgs args;
          for (std::size_t k = 0; k < a.inputs.size(); ++k) args.in[k] = a.inputs[k].data;
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
