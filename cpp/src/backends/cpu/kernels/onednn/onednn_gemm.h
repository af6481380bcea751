// GEMM kernel "onednn": one matmul::GemmProblem run by oneDNN's matmul
// primitive (brgemm on AVX-512/AVX2 CPUs) on the plain, strided operands as
// they lie, with the bias and activation fused as the primitive's bias and
// eltwise post-op. run_gemm("onednn", p) (ops/gemm_call.h) calls it and sends
// the problems it rejects to the cpu_blas path; the registry's matmul kernel
// "onednn" (matmul/cpu_matmul_kernels.cpp) answers supports() through it. See
// the .cpp for what is expressible and for the primitive cache.
//
// Compiled in every build: without oneDNN (XRT_HAVE_ONEDNN undefined) every
// problem is rejected with the install hint and onednn_gemm throws
// BackendUnavailableError.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "ops/matmul/gemm_problem.h"

namespace xpuruntime::cpu {

// Why oneDNN cannot run p (kind kNone when it can). Static checks (dtype, row
// sums, strides) first; then, for a problem with every dimension known, whether
// oneDNN has a fast (non-reference) implementation for it: that answer is the
// primitive cache's, so the primitive built here is the one a later run uses.
matmul::GemmRejection onednn_gemm_rejection(const matmul::GemmProblem& p);

// onednn_gemm_rejection as a yes/no; *why (when not null) gets the reason.
bool onednn_gemm_supports(const matmul::GemmProblem& p, std::string* why);

// Runs p when oneDNN can and returns true; returns false (with *why set when
// not null) and touches nothing when it cannot. Threads: parallel_threads(), or
// 1 when called inside one of our pool's parallel jobs.
bool try_onednn_gemm(const matmul::GemmProblem& p, std::string* why = nullptr);

// Runs p; throws UnsupportedOperationError (BackendUnavailableError without
// oneDNN) with the reason when oneDNN cannot.
void onednn_gemm(const matmul::GemmProblem& p);

// oneDNN's name of the implementation it runs p with ("brg:avx512_core", ...),
// or empty when it rejects p: for tests and diagnostics.
std::string onednn_gemm_impl(const matmul::GemmProblem& p);

// A constant B (a MatMul/Gemm step's weights) packed once, when the session is
// built, into oneDNN's blocked layout for one problem shape. Where B's rows (or,
// transposed, its columns) lie a multiple of 2 KiB apart they alias in the caches
// and brgemm on the plain operand runs slower (measured, 2 threads: M 128, K 768,
// N 3072 - BERT's FFN - 4.1-5.4 ms plain, 2.7 ms packed; Whisper's M 1500, K 384,
// N 1536: 10.6 vs 8.4 ms; other transformer shapes within a few percent either
// way), so only those are packed: the packed copy is memory beside the weights. make() returns null where that does not apply or oneDNN
// rejects the problem; run() runs a problem with the same shapes, strides,
// threads and B bytes, and returns false for any other (the caller then runs it
// the plain way).
class OnednnPackedWeights {
 public:
  static std::shared_ptr<const OnednnPackedWeights> make(const matmul::GemmProblem& p);
  bool run(const matmul::GemmProblem& p) const;
  ~OnednnPackedWeights();

  struct Impl;
  explicit OnednnPackedWeights(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// Primitives (and cached rejections) held now; the cache keeps at most
// kOnednnGemmCacheSize, dropping the least recently used.
inline constexpr std::size_t kOnednnGemmCacheSize = 256;
std::size_t onednn_gemm_cache_size();

}  // namespace xpuruntime::cpu
