// One GEMM problem in plain arguments, shared by every matmul kernel (cpu_blas,
// cpu_blocked, cublas, cublasLt) so they all read the same, already validated
// description and none of them sees Tensor or the registry:
//
//   C[b] = act(op(A[b]) · op(B[b]) + bias)      for b in [0, batch)
//
// Row-major semantics: A[b] is M×K, B[b] is K×N, C[b] is M×N, bias has N elements
// (one per output column, broadcast over rows and batches); optionally the row sums
// of A are written too (see a_row_sums). Every matrix carries
// element strides for rows (rs), columns (cs) and batches (bs), so a transposed
// operand is only a stride swap and a broadcast operand has bs == 0. All of A, B,
// C and bias share one dtype; the kernels accumulate in fp32 (fp64 for float64).
// Header-only so the CUDA plugin includes it without linking anything.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "xpuruntime/dtype.h"

namespace xpuruntime::matmul {

// Activation applied after the bias. kGelu is the tanh approximation
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), the one cuBLASLt's GELU epilogue
// computes, so every kernel gives the same function.
enum class Activation : uint8_t { kNone = 0, kRelu = 1, kGelu = 2 };

inline std::string_view activation_name(Activation a) {
  switch (a) {
    case Activation::kRelu: return "relu";
    case Activation::kGelu: return "gelu";
    default: return "none";
  }
}

struct MatrixRef {
  const void* data = nullptr;
  int64_t rs = 0;  // elements between rows
  int64_t cs = 1;  // elements between columns
  int64_t bs = 0;  // elements between batches (0: the same matrix for every batch)
};

struct GemmProblem {
  DType dtype = DType::kFloat32;
  int64_t batch = 1;
  int64_t m = 0, n = 0, k = 0;
  MatrixRef a;                 // M×K
  MatrixRef b;                 // K×N
  void* c = nullptr;           // M×N, written
  int64_t c_rs = 0, c_cs = 1, c_bs = 0;
  // The C that beta scales, when not c itself (cuBLASLt only: a residual read from
  // another tensor with c's strides); null: c is read in place.
  const void* c_in = nullptr;
  const void* bias = nullptr;  // N contiguous elements of `dtype`, or null
  Activation activation = Activation::kNone;
  // Written when non-null (batch 1, no bias, no activation): M contiguous elements of
  // `dtype`, row i = Σ_k op(A)[i, k]. With A = gᵀ (a linear layer's output gradient,
  // transposed) and B its input, C is the weight gradient and these sums the bias
  // gradient, from the same call (cuBLASLt's BGRAD epilogues). On Hopper cuBLASLt
  // runs that reduction as a kernel of its own and rounds its partial sums to
  // `dtype`; the PyTorch integration uses our column-sum kernel instead (faster and
  // fp32 throughout, see pytorch/ops/matmul.py).
  void* a_row_sums = nullptr;
  // fp32 inputs may use TF32 tensor cores (GPU kernels only; CPU kernels are exact fp32).
  bool allow_tf32 = false;

  int64_t flops() const { return 2 * batch * m * n * k; }
};

// Why a kernel cannot run a problem; kind kNone (false) when it can. The kinds map
// one-to-one to the registry's reason codes in the registration files.
struct GemmRejection {
  enum class Kind : uint8_t { kNone, kDtype, kShape, kLayout, kEpilogue } kind = Kind::kNone;
  std::string detail;
  explicit operator bool() const { return kind != Kind::kNone; }
};

// Why a kernel without a fused row-sums epilogue cannot run p (empty when p asks for
// none): every kernel but cublasLt rejects such problems through this.
inline GemmRejection row_sums_rejection(const GemmProblem& p, std::string_view kernel) {
  if (p.a_row_sums == nullptr) return {};
  return {GemmRejection::Kind::kEpilogue,
          std::string(kernel) + " has no fused row-sums (bias gradient) epilogue; cublasLt has one "
                                "(CUBLASLT_EPILOGUE_BGRADA/B), or sum the rows in a separate pass"};
}

// How a BLAS call sees a row-major rows×cols matrix stored with strides (rs, cs):
// either as itself (row contiguous, leading dimension rs) or as the transpose of a
// column-contiguous matrix (leading dimension cs). Strides of size-1 dimensions do
// not matter and are ignored, so views from any framework map when they can.
struct BlasLayout {
  bool transposed = false;  // false: row-major with ld; true: column-major with ld
  int64_t ld = 1;
};

inline std::optional<BlasLayout> blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  const bool row_contig = cs == 1 || cols <= 1;
  const bool col_contig = rs == 1 || rows <= 1;
  const int64_t min_row_ld = std::max<int64_t>(1, cols);
  const int64_t min_col_ld = std::max<int64_t>(1, rows);
  if (row_contig && (rows <= 1 || rs >= min_row_ld)) {
    return BlasLayout{false, rows <= 1 ? min_row_ld : rs};
  }
  if (col_contig && (cols <= 1 || cs >= min_col_ld)) {
    return BlasLayout{true, cols <= 1 ? min_col_ld : cs};
  }
  return std::nullopt;
}

// The problem as a column-major GEMM C' = op(X)·op(Y), the form cuBLAS and cuBLASLt
// take. A row-major C is computed as Cᵀ = Bᵀ·Aᵀ (X = Bᵀ, Y = Aᵀ, m' = N, n' = M:
// the classic operand swap, which also makes a per-column bias a per-row vector of
// C', as cuBLASLt's epilogue wants); a column-major C directly (X = A, Y = B).
struct ColMajorOperand {
  const void* data = nullptr;
  bool transpose = false;  // op T: the stored matrix is the transpose, leading dim ld
  int64_t ld = 1;
  int64_t batch_stride = 0;
};

struct ColMajorGemm {
  int64_t m = 0, n = 0, k = 0;  // of C' (m×n) and the reduction
  ColMajorOperand x, y;         // m×k and k×n
  int64_t ldc = 1;
  int64_t c_batch_stride = 0;
  bool swapped = false;  // true: C' = Cᵀ (C row-major)
};

// nullopt when one of A, B, C has no unit stride (BLAS cannot address it).
inline std::optional<ColMajorGemm> to_col_major(const GemmProblem& p) {
  auto c = blas_layout(p.m, p.n, p.c_rs, p.c_cs);
  if (!c) return std::nullopt;
  auto operand = [](const void* data, int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                    int64_t bs) -> std::optional<ColMajorOperand> {
    auto l = blas_layout(rows, cols, rs, cs);
    if (!l) return std::nullopt;
    // Column-contiguous storage is the matrix itself in column-major terms (op N);
    // row-contiguous storage is its transpose (op T).
    return ColMajorOperand{data, !l->transposed, l->ld, bs};
  };
  ColMajorGemm g;
  g.k = p.k;
  g.ldc = c->ld;
  g.c_batch_stride = p.c_bs;
  std::optional<ColMajorOperand> x, y;
  if (!c->transposed) {
    g.swapped = true;
    g.m = p.n;
    g.n = p.m;
    x = operand(p.b.data, p.n, p.k, p.b.cs, p.b.rs, p.b.bs);  // Bᵀ: N×K
    y = operand(p.a.data, p.k, p.m, p.a.cs, p.a.rs, p.a.bs);  // Aᵀ: K×M
  } else {
    g.m = p.m;
    g.n = p.n;
    x = operand(p.a.data, p.m, p.k, p.a.rs, p.a.cs, p.a.bs);
    y = operand(p.b.data, p.k, p.n, p.b.rs, p.b.cs, p.b.bs);
  }
  if (!x || !y) return std::nullopt;
  g.x = *x;
  g.y = *y;
  return g;
}

}  // namespace xpuruntime::matmul
