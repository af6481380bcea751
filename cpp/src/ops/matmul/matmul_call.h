// One matmul call from a framework-facing API (Python ops.matmul, the PyTorch
// routing): NumPy semantics in, a kernel chosen by the policy, a Decision in the
// dispatcher's log, the result out. Device-agnostic; it lives beside the GEMM
// description all matmul kernels share.
//
//   matmul(a, b):  a (..., M, K) or (K), b (..., K, N) or (K); batch dims broadcast;
//                  a 1-D operand gains a unit dim that the result drops (NumPy).
//   bias:          (N), added per output column.   activation: none | relu | gelu.
//   out:           written when given (shape, dtype and device must match; any
//                  strides a kernel supports), else allocated contiguous.
//   a_row_sums:    (M), contiguous, written with Σ_k a[i, k] in the same kernel
//                  (2-D a and b, no bias or activation; only cublasLt fuses it:
//                  a linear layer's bias gradient beside its weight gradient).
//
// Speed: a call whose (device, dtypes, shapes, strides, activation, execution
// policy fields, kernel policy) match an earlier call reuses that call's choice,
// algorithm and context, and re-records its Decision (with a fresh sequence
// number), so the per-call cost is a hash lookup instead of a full selection.
// The cache is invalidated by any change of the policy or of the registry.
// Thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "ops/matmul/gemm_problem.h"
#include "xpuruntime/decision.h"
#include "xpuruntime/policy.h"
#include "xpuruntime/tensor.h"

namespace xpuruntime::matmul {

struct MatmulArgs {
  Tensor a, b;
  std::optional<Tensor> bias;
  Activation activation = Activation::kNone;
  std::optional<Tensor> out;
  std::optional<Tensor> a_row_sums;
  // null: the dispatcher's effective policy (global or ScopedPolicy).
  const KernelPolicy* policy = nullptr;
  // null: defaults (no tf32, 32 MiB workspace, no strict assertions).
  const ExecutionPolicy* execution = nullptr;
  std::string node;  // call-site name for the decision log
  // Scratch from the caller (e.g. torch's graph-aware allocator under CUDA graph
  // capture) used instead of a block of ours; must hold the kernel's need. Only
  // matmul_with_kernel reads it.
  std::optional<Tensor> workspace;
};

// Dispatches one matmul and returns its output (args.out when given). Throws
// InvalidArgumentError for operands that do not multiply (naming both shapes),
// UnsupportedOperationError when no kernel may run the case (after recording it).
Tensor matmul(const MatmulArgs& args);

// Runs one named kernel directly: no policy, no decision (benchmarks and tests
// that compare kernels). Throws UnsupportedOperationError with the kernel's reason.
Tensor matmul_with_kernel(const std::string& kernel, const MatmulArgs& args,
                          const std::string& algorithm = "");

// Seconds per kernel.run() of a named kernel in a C++ loop over one prepared launch
// (operands normalized, context built and output allocated once, outside the
// loop): the floor that ops.matmul's per-call overhead is measured against.
// Synchronizes the stream after the loop for device kernels.
double time_kernel_runs(const std::string& kernel, const MatmulArgs& args, int iterations);

// The Decision of the calling thread's last successful matmul() (empty before the
// first, or after a call that raised: the dispatcher's log holds that one).
Decision last_matmul_decision();

void clear_matmul_call_cache();
std::size_t matmul_call_cache_size();

}  // namespace xpuruntime::matmul
