// Registration of the CPU matmul kernels (onednn, cpu_blas, cpu_blocked) as KernelDefs.
// Their prepare() binds the GEMM to a plan step: an ONNX MatMul/Gemm node runs its
// whole node logic (gemm.cpp) with this GEMM, a plain GEMM (a conv's sub-kernel)
// becomes a cpu::CpuGemmPrepared.
// register_cpu_kernels (backends/cpu/cpu_kernels.h) registers them with the CPU
// op kernels when the CPU plugin initializes.
#include "backends/cpu/matmul/cpu_matmul_kernels.h"

#include <memory>

#include "backends/cpu/matmul/cpu_gemm_impl.h"
#include "backends/cpu/onednn/onednn_context.h"
#include "backends/cpu/onednn/onednn_gemm.h"
#include "backends/cpu/ops/gemm_call.h"
#include "ops/matmul/matmul_op.h"

namespace xpuruntime {
namespace {

KernelDef cpu_matmul_def(std::string name, int priority, std::string description) {
  KernelDef d;
  d.op = matmul::kOpKey;
  d.name = std::move(name);
  d.provider = "cpu";
  d.device = DeviceType::kCPU;
  d.dtypes = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};
  d.priority = priority;
  d.deterministic = true;  // fixed blocking and thread split: same bits every run
  d.description = std::move(description);
  return d;
}

// Every layout read_gemm_layout accepts, except the fused row sums of a.
Support cpu_support(const OpContext& ctx, const char* kernel) {
  matmul::GemmLayout l;
  Support s = matmul::read_gemm_layout(ctx, &l);
  if (!s.ok) return s;
  return matmul::to_support(matmul::row_sums_rejection(matmul::shape_only_problem(l, false), kernel));
}

// cpu_blas: any layout (operands BLAS cannot address are copied into a scratch
// matrix first), fp16/bf16 through fp32 blocks.
class CpuBlasMatmul final : public Kernel {
 public:
  CpuBlasMatmul()
      : Kernel(cpu_matmul_def("cpu_blas", 20,
                              "CBLAS sgemm/dgemm (" + matmul::cpu_blas_info() +
                                  "); fp16/bf16 via fp32 blocks; bias and relu/gelu as a pass")) {}
  Support supports(const OpContext& ctx) const override {
    if (!matmul::cpu_blas_available()) {
      return Support::no(reason::kBackendUnavailable, matmul::cpu_blas_info());
    }
    return cpu_support(ctx, "cpu_blas");
  }
  void run(KernelLaunch& launch) const override { matmul::cpu_gemm_blas(matmul::gemm_problem(launch)); }
  PreparedKernelPtr prepare(const PrepareContext& pc) const override {
    return cpu::prepare_cpu_matmul(*this, "cpu_blas", pc);
  }
};

// onednn: oneDNN's matmul primitive on the operands as they lie (float32; see
// onednn/onednn_gemm.cpp). Above cpu_blas: measured 184-229 GFLOP/s against
// 92-144 on transformer shapes at 2 threads. It threads itself, so the prepared
// GEMM is not split by our pool; a run-time shape oneDNN rejects takes the
// cpu_blas path (run_gemm).
class CpuOnednnMatmul final : public Kernel {
 public:
  CpuOnednnMatmul() : Kernel(onednn_def()) {}
  Support supports(const OpContext& ctx) const override {
    if (!cpu::onednn::onednn_available()) {
      return Support::no(reason::kBackendUnavailable, cpu::onednn::onednn_info());
    }
    matmul::GemmLayout l;
    Support s = matmul::read_gemm_layout(ctx, &l);
    if (!s.ok) return s;
    return matmul::to_support(cpu::onednn_gemm_rejection(matmul::shape_only_problem(l, false)));
  }
  void run(KernelLaunch& launch) const override { cpu::run_gemm("onednn", matmul::gemm_problem(launch)); }
  PreparedKernelPtr prepare(const PrepareContext& pc) const override {
    return cpu::prepare_cpu_matmul(*this, "onednn", pc);
  }

 private:
  static KernelDef onednn_def() {
    KernelDef d = cpu_matmul_def("onednn", 30,
                                 "oneDNN matmul primitive (" + cpu::onednn::onednn_info() +
                                     "), plain strided operands, bias and relu/gelu fused, a "
                                     "primitive per shape in an LRU cache; float32");
    d.dtypes = {DType::kFloat32};
    return d;
  }
};

// cpu_blocked: ours; any strides, every float dtype, OpenMP over tiles.
class CpuBlockedMatmul final : public Kernel {
 public:
  CpuBlockedMatmul()
      : Kernel(cpu_matmul_def("cpu_blocked", 10,
                              std::string("cache-blocked packed GEMM, ") +
                                  std::string(matmul::cpu_isa_name(matmul::CpuIsa::kAuto)) +
                                  " micro-kernel, OpenMP over tiles; fused bias and relu/gelu")) {}
  Support supports(const OpContext& ctx) const override {
    return cpu_support(ctx, "cpu_blocked");
  }
  void run(KernelLaunch& launch) const override {
    matmul::cpu_gemm_blocked(matmul::gemm_problem(launch));
  }
  PreparedKernelPtr prepare(const PrepareContext& pc) const override {
    return cpu::prepare_cpu_matmul(*this, "cpu_blocked", pc);
  }
};

}  // namespace

void register_cpu_matmul_kernels(KernelRegistry& registry) {
  registry.register_kernel(std::make_shared<CpuOnednnMatmul>(), /*replace=*/true);
  registry.register_kernel(std::make_shared<CpuBlasMatmul>(), /*replace=*/true);
  registry.register_kernel(std::make_shared<CpuBlockedMatmul>(), /*replace=*/true);
}

}  // namespace xpuruntime
