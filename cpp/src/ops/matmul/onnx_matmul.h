// An ONNX MatMul or Gemm node as the matmul op (matmul_op.h) the Dispatcher
// chooses a GEMM kernel for: a and b (transposes as strides), the fused bias
// row, and c. A MatMul's batch maps to one tall GEMM (shared b), one batched
// GEMM (same batch shapes) or one GEMM per batch (other broadcasts), as the
// kernels then run it. Device-neutral: every provider dispatches MatMul/Gemm
// nodes through this. Pure and thread-safe.
#pragma once

#include <optional>
#include <vector>

#include "xpuruntime/ir.h"
#include "xpuruntime/kernel_registry.h"

namespace xpuruntime::matmul {

// Fills ctx.inputs/outputs for node `n` (op type MatMul or Gemm) from its input
// specs (nullopt: a shape known only at run time). Throws
// UnsupportedOperationError naming the node when an operand's shape is not
// known at compile time.
void onnx_matmul_context(const graph::Node& n, const std::vector<std::optional<TensorSpec>>& inputs,
                         OpContext& ctx);

}  // namespace xpuruntime::matmul
