// cuBLAS GEMM in plain arguments (no Tensor, no registry; see cublas_kernels.cpp
// for the registered kernel). One cublasGemmEx, or cublasGemmStridedBatchedEx for
// batch > 1, on the caller's stream; fp32 (TF32 tensor cores only with
// p.allow_tf32), fp16 and bf16 accumulate in fp32, fp64 in fp64. cuBLAS has no
// epilogue: problems with a bias or an activation are refused (use cublasLt).
// Thread-safe: each call leases a handle of the device's pool for its duration.
#pragma once

#include <cstddef>
#include <string>

#include "ops/matmul/gemm_problem.h"

namespace xpuruntime::matmul {

// Below this, cuBLAS routines may fail with CUBLAS_STATUS_ALLOC_FAILED (cuBLAS docs,
// cublasSetWorkspace).
inline constexpr std::size_t kCublasMinWorkspace = std::size_t{16} << 10;

// Why cublas_gemm cannot run p (empty when it can): dtype, layout, epilogue.
GemmRejection cublas_rejection(const GemmProblem& p);

// Enqueues C = alpha·A·B + beta·C (C read in place when beta != 0) on `stream` (a cudaStream_t; nullptr = legacy default stream) of
// CUDA device `device`. `workspace` (256-byte aligned device memory of at least
// kCublasMinWorkspace bytes) becomes the handle's workspace for this call; null
// uses the handle's own default pool. Throws InvalidArgumentError for a problem
// cublas_rejection rejects, CudaError when cuBLAS fails.
void cublas_gemm(const GemmProblem& p, void* stream, int device, void* workspace,
                 std::size_t workspace_bytes, double alpha = 1.0, double beta = 0.0);

// "cuBLAS 13.0.2" of the library loaded at run time.
std::string cublas_version();

}  // namespace xpuruntime::matmul
