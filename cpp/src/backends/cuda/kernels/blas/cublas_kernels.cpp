// The "cublas" matmul kernel: cublasGemmEx / cublasGemmStridedBatchedEx on the
// launch's stream (see cublas_gemm_impl.h). No epilogue: a bias or an activation
// is rejected with attribute_unsupported so the dispatcher can explain the choice
// of cublasLt instead.
#include "backends/cuda/kernels/blas/cublas_kernels.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "backends/cuda/cuda_kind.h"
#include "backends/cuda/kernels/blas/cublas_gemm_impl.h"
#include "backends/cuda/kernels/blas/cublaslt_gemm_impl.h"
#include "backends/cuda/kernels/blas/onnx_matmul_cuda.h"
#include "ops/matmul/matmul_op.h"

namespace xpuruntime {
namespace {

class CublasMatmul final : public Kernel {
 public:
  CublasMatmul() : Kernel(make_def()) {}

  Support supports(const OpContext& ctx) const override {
    matmul::GemmLayout l;
    Support s = matmul::read_gemm_layout(ctx, &l);
    if (!s.ok) return s;
    if (ctx.attr_int("_sum", 0) != 0)
      return Support::no(reason::kAttributeUnsupported,
                         "cublas has no residual epilogue (a fused Add); cublasLt reads it as C");
    if (l.dtype == DType::kBFloat16 && ctx.capability > 0 && ctx.capability < 80) {
      return Support::no(reason::kCapabilityTooLow, "bfloat16 GEMM needs sm_80 or newer, this is sm_" +
                                                        std::to_string(ctx.capability));
    }
    if (ctx.workspace_limit_bytes != 0 && ctx.workspace_limit_bytes < matmul::kCublasMinWorkspace) {
      return Support::no(reason::kWorkspaceExceeded,
                         "cuBLAS needs a workspace of at least " +
                             std::to_string(matmul::kCublasMinWorkspace) + " bytes; the policy allows " +
                             std::to_string(ctx.workspace_limit_bytes));
    }
    return matmul::to_support(matmul::cublas_rejection(matmul::shape_only_problem(l, ctx.allow_tf32)));
  }

  void run(KernelLaunch& launch) const override {
    matmul::cublas_gemm(matmul::gemm_problem(launch), launch.stream, launch.ctx->device.index,
                        launch.workspace, launch.workspace_bytes);
  }

  // cuBLAS on Hopper wants 32 MiB for its split-K and stream-K paths.
  std::size_t workspace_bytes(const OpContext& ctx) const override {
    const std::size_t want = matmul::kCublasLtDefaultWorkspace;
    return ctx.workspace_limit_bytes ? std::min(want, ctx.workspace_limit_bytes) : want;
  }

  // An ONNX MatMul/Gemm node of a native plan runs its own batching and C logic
  // on cuBLAS (no epilogues: a node with a fused bias/activation is refused);
  // anything else (a direct dispatch) the default KernelLaunch adapter.
  PreparedKernelPtr prepare(const PrepareContext& pc) const override {
    if (!matmul::is_onnx_matmul(pc)) return Kernel::prepare(pc);
    matmul::CudaGemmLibrary lib;
    lib.name = "cublas";
    lib.epilogues = false;
    lib.gemm = [](const matmul::GemmProblem& p, double alpha, double beta, void* stream, int device,
                  void* ws, std::size_t ws_bytes) {
      matmul::cublas_gemm(p, stream, device, ws, ws_bytes, alpha, beta);
    };
    lib.rejection = &matmul::cublas_rejection;
    return matmul::prepare_onnx_matmul(pc, std::move(lib), workspace_bytes(*pc.ctx));
  }

 private:
  static KernelDef make_def() {
    KernelDef d;
    d.op = matmul::kOpKey;
    d.name = "cublas";
    d.provider = "cublas";
    d.device = ::xpuruntime::cuda::kind();
    d.dtypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64};
    d.workspace_bytes = matmul::kCublasLtDefaultWorkspace;
    d.priority = 20;
    d.deterministic = true;  // same bits run to run on one GPU model and cuBLAS version
    d.description = matmul::cublas_version() +
                    ": cublasGemmEx / cublasGemmStridedBatchedEx, fp32 accumulate (tf32 only "
                    "when allowed), no epilogue";
    return d;
  }
};

}  // namespace

void register_cublas_kernels(KernelRegistry& registry) {
  registry.register_kernel(std::make_shared<CublasMatmul>(), /*replace=*/true);
}

}  // namespace xpuruntime
