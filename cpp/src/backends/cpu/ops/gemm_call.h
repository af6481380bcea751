// Calls the CPU GEMM kernel the dispatcher chose (node attribute "_gemm":
// "cpu_blas" or "cpu_blocked") through the matmul kernels' plain-argument API,
// plus the per-thread scratch buffer that im2col and packing use.
#pragma once

#include <cstddef>
#include <string>

#include "ops/matmul/gemm_problem.h"
#include "backends/cpu/ops/cpu_op.h"

namespace xpuruntime::cpu {

// The GEMM kernels MatMul/Gemm/Conv can call, best first.
const std::vector<std::string>& gemm_kernel_names();
// Runs the problem with the named kernel; throws UnsupportedOperationError for an
// unknown name or a kernel that is unavailable in this build.
void run_gemm(const std::string& kernel, const matmul::GemmProblem& p);
// The GEMM kernel recorded on a node (falls back to the best available).
std::string node_gemm_kernel(const Node& n);
// A per-thread buffer of at least `bytes` (64-byte aligned, grows, never shrinks).
// Valid until the same thread asks again.
void* thread_scratch(std::size_t bytes, int slot = 0);
// High-water mark of all threads' scratch buffers together (bytes), for memory reports.
std::size_t scratch_peak_bytes();

}  // namespace xpuruntime::cpu
