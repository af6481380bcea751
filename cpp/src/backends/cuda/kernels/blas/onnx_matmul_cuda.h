// An ONNX MatMul or Gemm node run on CUDA by one GEMM library (cuBLASLt or
// cuBLAS): what the CUDA matmul kernels' prepare() returns when the compiler
// dispatches such a node (pc.node), mirroring the CPU's onnx_matmul_run /
// onnx_gemm_run:
//   MatMul: 1-D promotion; batch broadcast as one tall GEMM (B shared), one
//           strided batched GEMM (same batch shapes, or A shared) or one GEMM
//           per output batch; a fused bias row and relu/gelu(tanh) epilogue.
//   Gemm:   transA/transB as strides, alpha and beta; C as the GEMM's bias
//           epilogue when it is a row with alpha = beta = 1 (cuBLASLt), else
//           broadcast into Y by device copies and accumulated with beta.
// Everything is enqueued on the run's stream (capturable: no host sync).
#pragma once

#include <functional>
#include <string>

#include "ops/matmul/gemm_problem.h"
#include "xpuruntime/kernel_registry.h"

namespace xpuruntime::matmul {

// One GEMM library as the ONNX matmul runner sees it.
struct CudaGemmLibrary {
  std::string name;  // "cublasLt", "cublas": for messages
  // Whether the library applies GemmProblem.bias and .activation itself.
  bool epilogues = false;
  // Enqueues C = alpha·op(A)·op(B) + beta·C (+ epilogue) on `stream`.
  std::function<void(const GemmProblem &p, double alpha, double beta, void *stream, int device,
                     void *workspace, std::size_t workspace_bytes)>
      gemm;
  // Why the library cannot run p (empty when it can).
  std::function<GemmRejection(const GemmProblem &p)> rejection;
  // The workspace p takes within `limit` (operand pointers ignored); empty: the
  // library may use all of it (cuBLAS chooses inside the call).
  std::function<std::size_t(const GemmProblem &p, int device, std::size_t limit)> workspace_need;
};

// True when pc.node is an ONNX MatMul or Gemm node (then prepare_onnx_matmul
// applies).
bool is_onnx_matmul(const PrepareContext &pc);

// The prepared kernel for the ONNX node of pc, running its GEMMs with `lib`
// (workspace: at most `workspace_bytes`; with lib.workspace_need and static shapes,
// what the step's GEMMs take). Throws UnsupportedOperationError naming the
// node for an epilogue the library cannot apply, a dtype it cannot run, or a
// Gemm C that does not broadcast to the output.
PreparedKernelPtr prepare_onnx_matmul(const PrepareContext &pc, CudaGemmLibrary lib,
                                      std::size_t workspace_bytes);

}  // namespace xpuruntime::matmul
