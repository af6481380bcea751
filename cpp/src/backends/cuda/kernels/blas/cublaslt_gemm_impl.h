// cuBLASLt GEMM in plain arguments (no Tensor, no registry; cublaslt_kernels.cpp
// registers the kernel). What it adds over cuBLAS:
//   - fused epilogues: bias, relu, gelu (tanh form), bias+relu, bias+gelu, and the
//     row sums of A (BGRADA/BGRADB: a linear layer's bias gradient fused into its
//     weight-gradient GEMM);
//   - algorithm choice: the heuristic's best for this problem and workspace limit,
//     or an explicit algorithm given as a string id (the 8 words of a
//     cublasLtMatmulAlgo_t in hex, "lt1:" + 128 hex digits), which is how tuning
//     results are pinned in a KernelPolicy and replayed bit for bit;
//   - the heuristic's top candidates as ids, for the dispatcher to time.
// Row-major problems run as Cᵀ = Bᵀ·Aᵀ (see to_col_major), strided batches as
// one call, on the caller's stream. Layouts, descriptors and heuristic answers are
// cached per problem shape; the cache and the per-device handles are thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ops/matmul/gemm_problem.h"

namespace xpuruntime::matmul {

// Workspace cublasLt asks for when the policy sets no limit (what cuBLAS
// recommends for Hopper).
inline constexpr std::size_t kCublasLtDefaultWorkspace = std::size_t{32} << 20;

// Why cublasLt cannot run p (empty when it can): dtype, layout, bias with a
// column-major output, k == 0.
GemmRejection cublaslt_rejection(const GemmProblem& p);

// The heuristic's best `max_count` algorithm ids for p's shape (pointers in p are
// ignored; 256-byte aligned operands are assumed) under `workspace_limit` bytes,
// best first. Throws CudaError when cuBLASLt fails, UnsupportedOperationError when
// it has no algorithm for the problem.
std::vector<std::string> cublaslt_heuristic_algorithms(const GemmProblem& p, int device,
                                                      std::size_t workspace_limit, int max_count);

// The workspace p's GEMM takes within `workspace_limit`: the pinned `algorithm`'s,
// or the most the heuristic's first choice needs over the operand alignments a run
// may bring (16, 64 or 256 bytes). A plan step reserves this, not the limit:
// cuBLASLt's first choice usually needs none, and 32 MiB per GEMM step grew arenas.
// The first choice under a limit of at least this is the same algorithm.
std::size_t cublaslt_workspace_need(const GemmProblem& p, int device, std::size_t workspace_limit,
                                    const std::string& algorithm);

// Enqueues the GEMM and its epilogue on `stream` of CUDA device `device`. With an
// empty `algorithm` the heuristic's best for the workspace given is used; otherwise
// the id must be valid for this problem (cublasLtMatmulAlgoCheck), fit in the
// workspace and suit the operands' alignment, else UnsupportedOperationError says
// which. `workspace` may be null (then workspace_bytes is treated as 0). With
// alpha/beta: C = alpha·op(A)·op(B) + beta·C (C read in place), then the epilogue.
void cublaslt_gemm(const GemmProblem& p, void* stream, int device, void* workspace,
                   std::size_t workspace_bytes, const std::string& algorithm, double alpha = 1.0,
                   double beta = 0.0);

// Algorithm ids: "lt1:" followed by the 8 64-bit words as 16 hex digits each.
// parse throws InvalidArgumentError on a malformed id.
std::string cublaslt_algorithm_id(const void* algo /* cublasLtMatmulAlgo_t* */);
void cublaslt_parse_algorithm_id(const std::string& id, void* algo /* cublasLtMatmulAlgo_t* */);
// "tile=... stages=... splitK=..." for an id, for decision details and benchmarks.
std::string cublaslt_describe_algorithm(const std::string& id);

// "cuBLASLt 130002" (cublasLtGetVersion of the library loaded at run time).
std::string cublaslt_version();

}  // namespace xpuruntime::matmul
