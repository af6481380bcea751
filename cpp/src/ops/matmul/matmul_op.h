// The matmul op as every matmul kernel reads it (op key "matmul"):
//
//   inputs  [a (..., M, K), b (..., K, N), optional bias (N)]
//   outputs [c (..., M, N), optional a_row_sums (M): Σ_k a[i, k], batch 1 only]
//   attrs   "activation": "none" | "relu" | "gelu"   (absent = none)
//           "b_constant": "1" when b is a plan constant (absent = not known constant)
//
// Batch dims broadcast like NumPy and must each flatten to one batch stride per
// operand (any view the Python ops layer produces does; other callers make their
// operands contiguous first). Transposes are strides, not attributes. One parser
// here keeps the CPU and CUDA kernels' notion of "supported" identical.
// Functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ops/matmul/gemm_problem.h"
#include "xpuruntime/kernel_registry.h"

namespace xpuruntime::matmul {

inline constexpr const char* kOpKey = "matmul";
inline constexpr const char* kActivationAttr = "activation";
// "1" when b is a constant of the native engine's plan (a MatMul/Gemm's weights), set by
// the plan's dispatch (graph/prepare.cpp): a kernel that packs B once at prepare
// (cpu_packed) takes only such cases, as packing per call would not pay.
inline constexpr const char* kBConstantAttr = "b_constant";

// Parses "none"/"" | "relu" | "gelu"; throws InvalidArgumentError listing the choices.
Activation activation_from_string(std::string_view s);

// Operands may have at most this many dims.
inline constexpr std::size_t kMaxRank = 16;

// NumPy broadcast of two batch shapes; nullopt when they do not broadcast.
std::optional<Shape> broadcast_batch(std::span<const int64_t> a, std::span<const int64_t> b);

// The one element stride that walks an operand's batch dims (shape[:-2], aligned
// right with out_batch; size-1 and missing dims broadcast) in row-major batch
// order, or nullopt when no single stride does (then the operand must be
// materialized). `strides` are the operand's full strides.
std::optional<int64_t> flat_batch_stride(std::span<const int64_t> out_batch,
                                         std::span<const int64_t> shape,
                                         std::span<const int64_t> strides);

// A GemmProblem without pointers, read from specs (shapes, strides, attributes).
struct GemmLayout {
  DType dtype = DType::kFloat32;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  MatrixRef a, b;  // data null
  int64_t c_rs = 0, c_cs = 1, c_bs = 0;
  bool has_bias = false;
  bool has_row_sums = false;  // a second output receives the row sums of a
  Activation activation = Activation::kNone;
};

// Fills *out, or says why the specs are no matmul a kernel can address
// (shape_unsupported, dtype_unsupported, layout_unsupported, attribute_unsupported).
Support read_gemm_layout(const OpContext& ctx, GemmLayout* out);

// The full problem of a launch (pointers from its tensors, tf32 from its context).
// Throws InvalidArgumentError with read_gemm_layout's reason when it does not fit.
GemmProblem gemm_problem(const KernelLaunch& launch);

// The problem of a layout for shape-only questions (supports(), heuristics): data
// pointers are null and a bias or row-sums output is marked by a non-null
// placeholder that must never be dereferenced.
GemmProblem shape_only_problem(const GemmLayout& l, bool allow_tf32);

// A kernel's GemmRejection as the registry's Support (reason code + detail).
Support to_support(const GemmRejection& r);

}  // namespace xpuruntime::matmul
