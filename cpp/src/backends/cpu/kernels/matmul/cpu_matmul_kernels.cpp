// Registration of the CPU matmul kernels (cpu_packed, onednn, cpu_blas, cpu_blocked) as
// KernelDefs.
// Their prepare() binds the GEMM to a plan step: an ONNX MatMul/Gemm node runs its
// whole node logic (gemm.cpp) with this GEMM, a plain GEMM (a conv's sub-kernel)
// becomes a cpu::CpuGemmPrepared.
// register_cpu_kernels (backends/cpu/cpu_kernels.h) registers them with the CPU
// op kernels when the CPU plugin initializes.
#include "backends/cpu/kernels/matmul/cpu_matmul_kernels.h"

#include <memory>
#include <string>

#include "backends/cpu/kernels/conv_kernels.h"
#include "backends/cpu/kernels/gemm_call.h"
#include "backends/cpu/kernels/matmul/cpu_gemm_impl.h"
#include "backends/cpu/kernels/matmul/cpu_gemm_packed.h"
#include "backends/cpu/kernels/onednn/onednn_context.h"
#include "backends/cpu/kernels/onednn/onednn_gemm.h"
#include "ops/matmul/matmul_op.h"

namespace xpuruntime {
namespace {

KernelDef cpu_matmul_def(std::string name, int priority, std::string description) {
  KernelDef d;
  d.op = matmul::kOpKey;
  d.name = std::move(name);
  d.provider = "cpu";
  d.device = DeviceKind::cpu();
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

// cpu_gemv: ours, for one float32 row against weights stored N x K (Gemm transB: a
// classifier's head at batch 1): one AVX2 dot product per output over a contiguous
// weight row (conv_gemv), the outputs split over our pool in 32-column pieces
// (gemm.cpp, run_gemm). OpenBLAS 0.3.21's sgemv and sgemm-with-one-row are about 2x
// slower on these shapes at 2 threads (1280x1000: 220 vs 93 us; 2048x1000: 307 vs
// 179 us), and onednn and cpu_packed refuse one-row products. Above cpu_blas, which
// still runs every case when a policy requires it.
class CpuGemvMatmul final : public Kernel {
 public:
  CpuGemvMatmul() : Kernel(gemv_def()) {}
  Support supports(const OpContext& ctx) const override {
    if (!cpu::conv_kernels_avx2()) {
      return Support::no(reason::kBackendUnavailable, "cpu_gemv needs AVX2, which this CPU lacks");
    }
    matmul::GemmLayout l;
    Support s = matmul::read_gemm_layout(ctx, &l);
    if (!s.ok) return s;
    if (l.m != 1 || l.batch != 1 || l.k <= 0) {
      return Support::no(reason::kShapeUnsupported,
                         "cpu_gemv takes one row of A (a batch-1 head); this product has " +
                             (l.m < 0 ? std::string("a dynamic row count")
                                      : std::to_string(l.m * l.batch) + " rows"));
    }
    if (l.b.rs != 1 || l.b.cs != l.k || l.a.cs != 1 || l.c_cs != 1) {
      return Support::no(reason::kLayoutUnsupported,
                         "cpu_gemv reads B as N x K rows (Gemm transB = 1) and A and C as "
                         "contiguous rows; cpu_blas runs this layout");
    }
    if (l.activation != matmul::Activation::kNone || l.has_row_sums) {
      return Support::no(reason::kAttributeUnsupported,
                         "cpu_gemv fuses a bias only (no activation or row sums)");
    }
    return Support::yes();
  }
  void run(KernelLaunch& launch) const override {
    cpu::run_gemm("cpu_gemv", matmul::gemm_problem(launch));
  }
  PreparedKernelPtr prepare(const PrepareContext& pc) const override {
    return cpu::prepare_cpu_matmul(*this, "cpu_gemv", pc);
  }

 private:
  static KernelDef gemv_def() {
    KernelDef d = cpu_matmul_def("cpu_gemv", 25,
                                 "ours: one row against N x K weights (Gemm transB at batch 1), "
                                 "an AVX2 dot product per output, outputs split over threads, "
                                 "bias fused; float32");
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

// cpu_packed: ours, float32 on AVX-512F, weights packed once (cpu_gemm_packed.h).
// Above onednn: on transformer projections at 2 threads (benchmarks/bench_cpu_gemm.py)
// it runs at ONNX Runtime's MLAS speed, which oneDNN 2.6's brgemm did not reach. It
// takes the products whose B is one matrix for every batch (a MatMul/Gemm's
// weights, marked by the plan's dispatch with attribute b_constant); the rest stay
// with onednn:
//   - B not a plan constant (direct calls, torch routing, activations, the inner GEMM
//     of a Conv or attention): packing per call measured 1.1-9x slower than onednn;
//   - one or two rows: matrix-vector products, cpu_gemv (weights N x K) or cpu_blas's
//     split is faster (as onednn);
//   - a B per batch: nothing to pack ahead.
class CpuPackedMatmul final : public Kernel {
 public:
  CpuPackedMatmul() : Kernel(packed_def()) {}
  Support supports(const OpContext& ctx) const override {
    if (!matmul::cpu_gemm_packed_available()) {
      return Support::no(reason::kBackendUnavailable,
                         "cpu_packed needs AVX-512F, which this CPU (or OS) lacks");
    }
    matmul::GemmLayout l;
    Support s = matmul::read_gemm_layout(ctx, &l);
    if (!s.ok) return s;
    s = matmul::to_support(matmul::cpu_gemm_packed_rejection(matmul::shape_only_problem(l, false)));
    if (!s.ok) return s;
    if (ctx.attr_str(matmul::kBConstantAttr, "0") != "1") {
      return Support::no(reason::kShapeUnsupported,
                         "cpu_packed packs a plan's constant weights once; this B is not one (a "
                         "direct call, an activation, a Conv's or attention's inner GEMM), and "
                         "packing it per call does not pay: onednn reads it in place");
    }
    if (l.batch > 1 && l.b.bs != 0) {
      return Support::no(reason::kShapeUnsupported,
                         "cpu_packed: B differs per batch (batch " + std::to_string(l.batch) +
                             "), so there is no weight to pack ahead: onednn runs it");
    }
    if (l.m >= 0 && l.m <= 2 && l.k > 0) {
      return Support::no(
          reason::kShapeUnsupported,
          "cpu_packed: " + std::to_string(l.m) +
              " row(s): a matrix-vector product, faster on cpu_gemv (weights N x K) or "
              "cpu_blas's split");
    }
    return Support::yes();
  }
  void run(KernelLaunch& launch) const override {
    cpu::run_gemm("cpu_packed", matmul::gemm_problem(launch));
  }
  PreparedKernelPtr prepare(const PrepareContext& pc) const override {
    return cpu::prepare_cpu_matmul(*this, "cpu_packed", pc);
  }

 private:
  static KernelDef packed_def() {
    KernelDef d = cpu_matmul_def("cpu_packed", 40,
                                 "ours: AVX-512F 6x64 micro-kernel on B packed once into 64-column "
                                 "panels (a MatMul/Gemm's constant weights, at session build), A "
                                 "read in place, bias fused, threads over panels or row blocks; "
                                 "float32");
    d.dtypes = {DType::kFloat32};
    return d;
  }
};

}  // namespace

void register_cpu_matmul_kernels(KernelRegistry& registry) {
  registry.register_kernel(std::make_shared<CpuPackedMatmul>(), /*replace=*/true);
  registry.register_kernel(std::make_shared<CpuOnednnMatmul>(), /*replace=*/true);
  registry.register_kernel(std::make_shared<CpuGemvMatmul>(), /*replace=*/true);
  registry.register_kernel(std::make_shared<CpuBlasMatmul>(), /*replace=*/true);
  registry.register_kernel(std::make_shared<CpuBlockedMatmul>(), /*replace=*/true);
}

}  // namespace xpuruntime
