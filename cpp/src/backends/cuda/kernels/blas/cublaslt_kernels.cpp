// The "cublasLt" matmul kernel (see cublaslt_gemm_impl.h): fused bias/relu/gelu
// epilogues, the heuristic's algorithm by default, an explicit algorithm from a
// pin or from tuning (KernelLaunch::algorithm), and algorithms() = the heuristic's
// top candidates, which the dispatcher times under best_performance (CUDA events,
// cached per case key) and export_pins() writes into the policy.
#include "backends/cuda/kernels/blas/cublaslt_kernels.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "backends/cuda/cuda_kind.h"
#include "backends/cuda/kernels/blas/cublaslt_gemm_impl.h"
#include "backends/cuda/kernels/blas/onnx_matmul_cuda.h"
#include "ops/matmul/matmul_op.h"
#include "xpuruntime/error.h"

namespace xpuruntime {
namespace {

// How many of the heuristic's candidates tuning times.
constexpr int kTuningCandidates = 8;

std::size_t lt_workspace(const OpContext& ctx) {
  const std::size_t want = matmul::kCublasLtDefaultWorkspace;
  return ctx.workspace_limit_bytes ? std::min(want, ctx.workspace_limit_bytes) : want;
}

class CublasLtMatmul final : public Kernel {
 public:
  CublasLtMatmul() : Kernel(make_def()) {}

  Support supports(const OpContext& ctx) const override {
    matmul::GemmLayout l;
    Support s = matmul::read_gemm_layout(ctx, &l);
    if (!s.ok) return s;
    if (l.dtype == DType::kBFloat16 && ctx.capability > 0 && ctx.capability < 80) {
      return Support::no(reason::kCapabilityTooLow, "bfloat16 GEMM needs sm_80 or newer, this is sm_" +
                                                        std::to_string(ctx.capability));
    }
    return matmul::to_support(matmul::cublaslt_rejection(matmul::shape_only_problem(l, ctx.allow_tf32)));
  }

  void run(KernelLaunch& launch) const override {
    matmul::cublaslt_gemm(matmul::gemm_problem(launch), launch.stream, launch.ctx->device.index,
                          launch.workspace, launch.workspace_bytes, launch.algorithm);
  }

  std::vector<std::string> algorithms(const OpContext& ctx) const override {
    matmul::GemmLayout l;
    if (!matmul::read_gemm_layout(ctx, &l).ok) return {};
    try {
      return matmul::cublaslt_heuristic_algorithms(matmul::shape_only_problem(l, ctx.allow_tf32),
                                                   ctx.device.index, lt_workspace(ctx),
                                                   kTuningCandidates);
    } catch (const XpuRuntimeError&) {
      // No candidates: tuning then times the default path, whose failure it records.
      return {};
    }
  }

  std::size_t workspace_bytes(const OpContext& ctx) const override { return lt_workspace(ctx); }

  // An ONNX MatMul/Gemm node of a native plan runs its own batching, C and
  // epilogue logic on cuBLASLt; anything else (a direct dispatch) the default
  // KernelLaunch adapter.
  PreparedKernelPtr prepare(const PrepareContext& pc) const override {
    if (!matmul::is_onnx_matmul(pc)) return Kernel::prepare(pc);
    matmul::CudaGemmLibrary lib;
    lib.name = "cublasLt";
    lib.epilogues = true;
    const std::string algorithm = pc.algorithm;
    lib.gemm = [algorithm](const matmul::GemmProblem& p, double alpha, double beta, void* stream,
                           int device, void* ws, std::size_t ws_bytes) {
      matmul::cublaslt_gemm(p, stream, device, ws, ws_bytes, algorithm, alpha, beta);
    };
    lib.rejection = &matmul::cublaslt_rejection;
    lib.workspace_need = [algorithm](const matmul::GemmProblem& p, int device, std::size_t limit) {
      return matmul::cublaslt_workspace_need(p, device, limit, algorithm);
    };
    return matmul::prepare_onnx_matmul(pc, std::move(lib), lt_workspace(*pc.ctx));
  }

 private:
  static KernelDef make_def() {
    KernelDef d;
    d.op = matmul::kOpKey;
    d.name = "cublasLt";
    d.provider = "cublasLt";
    d.device = ::xpuruntime::cuda::kind();
    d.dtypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
    d.workspace_bytes = matmul::kCublasLtDefaultWorkspace;
    d.priority = 30;
    d.deterministic = true;  // a fixed algorithm gives the same bits run to run
    d.description = matmul::cublaslt_version() +
                    ": heuristic or pinned algorithm, tuning over the heuristic's top " +
                    std::to_string(kTuningCandidates) +
                    ", fused bias/relu/gelu epilogues, strided batches";
    return d;
  }
};

}  // namespace

void register_cublaslt_kernels(KernelRegistry& registry) {
  registry.register_kernel(std::make_shared<CublasLtMatmul>(), /*replace=*/true);
}

}  // namespace xpuruntime
