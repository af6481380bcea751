// The CPU GEMM kernels (onednn, cpu_blas, cpu_blocked) as the op kernels call them: by
// name on a GemmProblem (our pool splits it), bound once at prepare time; the
// prepared forms of the matmul kernels (ONNX MatMul/Gemm nodes, and the plain GEMM
// a Conv holds as its sub-kernel); plus the per-thread scratch buffer that im2col
// and packing use.
#pragma once

#include <functional>

#include <cstddef>
#include <string>

#include "ops/matmul/gemm_problem.h"
#include "backends/cpu/kernels/cpu_op.h"
#include "xpuruntime/ops/epilogue.h"
#include "xpuruntime/ops/gemm.h"

namespace xpuruntime::cpu {

// The GEMM kernels MatMul/Gemm/Conv can call, best first.
const std::vector<std::string>& gemm_kernel_names();
// Runs the problem with the named kernel; throws UnsupportedOperationError for an
// unknown name or a kernel that is unavailable in this build.
void run_gemm(const std::string& kernel, const matmul::GemmProblem& p);

// ONNX MatMul (numpy batch broadcast, 1-D promotion, fused bias and activation) and
// Gemm (transA/B, alpha, beta, C, fused activation) run with the named GEMM kernel;
// the epilogue is the node's ops::Epilogue.
// A MatMul/Gemm node's attributes and epilogue, parsed once per plan step.
struct MatmulStep {
  ops::GemmAttrs attrs;  // Gemm only
  ops::Epilogue epilogue;
  static MatmulStep from_node(const Node& n) {
    return {ops::GemmAttrs::from_node(n), ops::Epilogue::from_node(n)};
  }
};
// `first`, when given, is tried on every GEMM problem before run_gemm and returns
// true when it ran it (the onednn kernel's packed constant weights).
using GemmFirst = std::function<bool(const matmul::GemmProblem&)>;
void onnx_matmul_run(const std::string& gemm, const MatmulStep& s, const Node& n,
                     const std::vector<TensorView>& in, std::vector<TensorView>& out,
                     const GemmFirst* first = nullptr);
void onnx_gemm_run(const std::string& gemm, const MatmulStep& s, const Node& n,
                   const std::vector<TensorView>& in, std::vector<TensorView>& out,
                   const GemmFirst* first = nullptr);

// A CPU GEMM kernel bound to one plain GEMM problem (what a Conv's prepare_sub
// returns for op "matmul"): run() runs the case of its OpContext, run_problem()
// runs any GemmProblem with the same kernel (the conv's tiles).
class CpuGemmPrepared final : public PreparedKernel {
 public:
  CpuGemmPrepared(std::string gemm, PreparedKernelPtr plain)
      : gemm_(std::move(gemm)), plain_(std::move(plain)) {}
  const std::string& gemm() const { return gemm_; }
  void run_problem(const matmul::GemmProblem& p) const { run_gemm(gemm_, p); }
  void run(const KernelArgs& args) const override { plain_->run(args); }
  std::size_t workspace_bytes() const override { return plain_->workspace_bytes(); }

 private:
  std::string gemm_;
  PreparedKernelPtr plain_;  // the kernel's KernelLaunch adapter for run()
};

// Kernel::prepare of the CPU matmul kernel `kernel` (named `gemm`): for an ONNX
// MatMul/Gemm node (pc.node->op_type) a prepared kernel running that node's logic
// with this GEMM; for anything else (a conv's GEMM, a direct dispatch) a
// CpuGemmPrepared.
PreparedKernelPtr prepare_cpu_matmul(const Kernel& kernel, const std::string& gemm,
                                     const PrepareContext& pc);
// A per-thread buffer of at least `bytes` (64-byte aligned, grows, never shrinks).
// Valid until the same thread asks again.
void* thread_scratch(std::size_t bytes, int slot = 0);
// High-water mark of all threads' scratch buffers together (bytes), for memory reports.
std::size_t scratch_peak_bytes();

}  // namespace xpuruntime::cpu
