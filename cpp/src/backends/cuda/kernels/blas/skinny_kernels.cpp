// The "skinny" matmul kernel (see skinny_gemm_impl.h): decode-shaped GEMMs with
// M <= 16 in fp16/bf16 on sm_90+, bias and relu/gelu fused, any strides, on the
// launch's stream, no workspace. Its priority is below cuBLAS and cuBLASLt so
// first_supported keeps their choice; best_performance times it next to them and
// picks it where it wins (a pin records that choice like any other).
#include "backends/cuda/kernels/blas/skinny_kernels.h"

#include <memory>

#include "backends/cuda/cuda_kind.h"
#include "backends/cuda/kernels/blas/onnx_matmul_cuda.h"
#include "backends/cuda/kernels/blas/skinny_gemm_impl.h"
#include "ops/matmul/matmul_op.h"
#include "xpuruntime/error.h"

namespace xpuruntime {
namespace {

class SkinnyMatmul final : public Kernel {
 public:
  SkinnyMatmul() : Kernel(make_def()) {}

  Support supports(const OpContext& ctx) const override {
    matmul::GemmLayout l;
    Support s = matmul::read_gemm_layout(ctx, &l);
    if (!s.ok) return s;
    if (ctx.attr_int("_sum", 0) != 0)
      return Support::no(reason::kAttributeUnsupported,
                         "skinny has no residual epilogue (a fused Add); cublasLt reads it as C");
    return matmul::to_support(matmul::skinny_rejection(matmul::shape_only_problem(l, ctx.allow_tf32)));
  }

  void run(KernelLaunch& launch) const override {
    matmul::skinny_gemm(matmul::gemm_problem(launch), launch.stream, launch.ctx->device.index);
  }

  // An ONNX MatMul/Gemm node of a plan runs through the same node runner as cuBLASLt
  // (batch broadcast, 1-D promotion, transposes, the fused bias/activation), with this
  // kernel as the GEMM. It has no alpha/beta: a Gemm that scales is refused here, at
  // plan build, naming the node; a C that is not a bias row (it needs beta) is refused
  // by the GEMM call with the same error type.
  PreparedKernelPtr prepare(const PrepareContext& pc) const override {
    if (!matmul::is_onnx_matmul(pc)) return Kernel::prepare(pc);
    const graph::Node& n = *pc.node;
    XRT_CHECK(n.op_type != "Gemm" || n.attr_float("alpha", 1.0) == 1.0, UnsupportedOperationError,
              n.where(), ": the skinny kernel has no alpha; choose cublasLt for this Gemm");
    matmul::CudaGemmLibrary lib;
    lib.name = "skinny";
    lib.epilogues = true;  // bias and relu/gelu are fused
    lib.gemm = [where = n.where()](const matmul::GemmProblem& p, double alpha, double beta, void* stream,
                                   int device, void*, std::size_t) {
      XRT_CHECK(alpha == 1.0 && beta == 0.0, UnsupportedOperationError, where,
                ": the skinny kernel cannot scale (alpha ", alpha, ", beta ", beta,
                "); choose cublasLt for this node");
      matmul::skinny_gemm(p, stream, device);
    };
    lib.rejection = [](const matmul::GemmProblem& p) { return matmul::skinny_rejection(p); };
    return matmul::prepare_onnx_matmul(pc, std::move(lib), 0);
  }

 private:
  static KernelDef make_def() {
    KernelDef d;
    d.op = matmul::kOpKey;
    d.name = "skinny";
    d.provider = "cuda_raw";
    d.device = ::xpuruntime::cuda::kind();
    d.dtypes = {DType::kFloat16, DType::kBFloat16};
    d.min_capability = matmul::kSkinnyMinCapability;
    d.workspace_bytes = 0;
    d.priority = 10;
    d.deterministic = true;  // split-K partials are summed in a fixed order, no atomics
    d.description =
        "ours: split-K tensor-core GEMM for M <= 16 (decode shapes), cp.async pipeline, "
        "thread-block-cluster reduction, fused bias/relu/gelu";
    return d;
  }
};

}  // namespace

void register_skinny_kernels(KernelRegistry& registry) {
  registry.register_kernel(std::make_shared<SkinnyMatmul>(), /*replace=*/true);
}

}  // namespace xpuruntime
