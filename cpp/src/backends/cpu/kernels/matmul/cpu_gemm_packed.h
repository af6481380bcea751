// GEMM kernel "cpu_packed": ours, float32, AVX-512F. B (K×N, any strides, so a
// Gemm's transB=1 weights too) is packed ONCE into column panels of kPackedNr
// columns (each panel K rows of 64 floats, contiguous; the last panel
// zero-padded), and a 6×64 register-tiled micro-kernel (24 zmm accumulators)
// reads A in place (rows contiguous; otherwise A is copied row-major first), K
// in blocks of at most kPackedKc so a panel's block stays in L2 while the row
// tiles stream past it. Bias (initial accumulator) and relu/gelu (on each
// finished tile, while it is in L1) are the epilogue. Threads: our pool
// (parallel_for) over column panels, or over row blocks for tall A.
//
// A MatMul/Gemm step packs its constant weights at session build
// (PackedB::pack, from OnnxMatmulPrepared in ops/gemm.cpp) and every run
// multiplies against that copy; a problem whose B is not packed ahead (a
// non-constant B, a direct xpuruntime.ops call) is packed per call
// (cpu_gemm_packed).
//
// Thread-safe: a PackedB is immutable after pack().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "ops/matmul/gemm_problem.h"

namespace xpuruntime::matmul {

inline constexpr int64_t kPackedNr = 64;  // columns per panel: 4 zmm of fp32
inline constexpr int64_t kPackedMr = 6;   // rows per micro-tile: 6 x 4 = 24 accumulators
// Largest K block: a panel's 1024 x 64 floats (256 KiB) stay in L2 across the
// row tiles. Measured (2 threads, Zen4, M 128): K blocks of 96-256 ran 5-10%
// slower than 768-1024; longer made no difference.
inline constexpr int64_t kPackedKc = 1024;

// True when this CPU (and OS) runs AVX-512F: the kernel's only requirement.
bool cpu_gemm_packed_available();

// Why cpu_packed cannot run p at all (kind kNone when it can): no AVX-512F, a
// dtype other than float32, the row-sums epilogue, or C without contiguous rows
// (c_cs != 1). Shape preferences (which kernel is faster where) are the
// registry's, not this.
GemmRejection cpu_gemm_packed_rejection(const GemmProblem& p);

// A K×N float32 operand packed into kPackedNr-column panels.
class PackedB {
 public:
  // Packs b (K×N with b's rs/cs; bs ignored). Throws InvalidArgumentError for
  // k or n < 1 or a null pointer, BackendUnavailableError without AVX-512F.
  static std::shared_ptr<const PackedB> pack(const MatrixRef& b, int64_t k, int64_t n);
  // pack(), but one copy per operand (address, strides, K, N) while any holder keeps
  // it: ALBERT's 12 layers share each weight, and 12 packed copies (340 MB instead of
  // 28) cannot stay in L3 as the shared plain weights do. Only for operands whose
  // bytes never change while a holder of the copy keeps them alive (a plan's
  // constants, held by the same prepared step). Thread-safe.
  static std::shared_ptr<const PackedB> pack_shared(const MatrixRef& b, int64_t k, int64_t n);

  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  std::size_t bytes() const {
    return static_cast<std::size_t>(panels() * k_ * kPackedNr) * sizeof(float);
  }
  int64_t panels() const { return (n_ + kPackedNr - 1) / kPackedNr; }
  const float* panel(int64_t j) const { return data_.get() + j * k_ * kPackedNr; }
  // True when p's B is the operand this was packed from (same address, strides,
  // K and N, shared by every batch): p may then run on this copy.
  bool serves(const GemmProblem& p) const;

  struct Free {
    void operator()(float* p) const noexcept;
  };
  PackedB(std::unique_ptr<float[], Free> data, const MatrixRef& src, int64_t k, int64_t n)
      : data_(std::move(data)), src_(src), k_(k), n_(n) {}

 private:
  std::unique_ptr<float[], Free> data_;
  MatrixRef src_;
  int64_t k_, n_;
};

// Runs p (float32, C rows contiguous) against packed: p.b is not read, every
// batch uses packed as its B. With `accumulate`, C += A·B (C's values are the
// starting accumulators; p.bias is not read): a sum of products into one C, as a
// convolution's taps run as several GEMMs (onednn_conv1d_gemm.h). Throws
// InvalidArgumentError when p cannot run (cpu_gemm_packed_rejection) or K/N
// differ from packed's.
void cpu_gemm_packed_run(const GemmProblem& p, const PackedB& packed, bool accumulate = false);

// Runs p, packing its B per call (per batch when B differs between batches).
void cpu_gemm_packed(const GemmProblem& p);

}  // namespace xpuruntime::matmul
