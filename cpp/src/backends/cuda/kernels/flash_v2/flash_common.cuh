// Pieces shared by the forward and backward attention kernels: tile loads into
// swizzled shared memory, score masking and the dropout scale.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/kernels/flash_v2/flash_ptx.cuh"
#include "backends/cuda/kernels/flash_v2/flash_v2_impl.h"
#include "backends/cuda/kernels/flash_v2/philox.cuh"

namespace xpuruntime::cuda_kernels::flash {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));  // ex2(-inf) = +0
  return y;
}

__host__ __device__ constexpr int cdiv(int a, int b) { return (a + b - 1) / b; }

// Copies rows [row0, row0 + kRows) of a [rows_valid, kD] matrix (row stride in
// elements) into a swizzled shared tile; rows past rows_valid are zero-filled so
// padded scores stay finite and padded values contribute nothing.
template <typename T, int kD, int kRows, int kThreads>
__device__ __forceinline__ void load_tile(T* smem, const T* gmem, int64_t row_stride, int row0,
                                          int rows_valid, int tid) {
  constexpr int kChunksPerRow = kD / 8;
  static_assert(kThreads % kChunksPerRow == 0, "a thread keeps one chunk column");
  constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static_assert(kRows % kRowsPerPass == 0, "tile rows must divide among the threads");
  const int r0 = tid / kChunksPerRow;
  const int cc = tid % kChunksPerRow;
  // One running pointer (not one per pass): keeps the address registers few in
  // kernels that are already at the register limit.
  const T* src = gmem + static_cast<int64_t>(row0 + r0) * row_stride + cc * 8;
  const int64_t step = static_cast<int64_t>(kRowsPerPass) * row_stride;
#pragma unroll
  for (int i = 0; i < kRows / kRowsPerPass; ++i) {
    const int r = r0 + i * kRowsPerPass;
    const bool valid = row0 + r < rows_valid;
    cp_async_16(smem + swz<kD>(r, cc * 8), valid ? src : gmem, valid);
    src += step;
  }
}

// The user mask of one (batch, head), read element by element (it is optional
// and broadcastable, so it has arbitrary strides). Returns the log2-domain term to
// add to a score: 0, a finite additive value, or -inf for a masked-out entry.
struct MaskView {
  FlashMaskKind kind;
  const char* base;  // already offset to (batch, head)
  int64_t stride_q, stride_k;

  __device__ __forceinline__ float log2_term(int row, int col) const {
    const int64_t off = static_cast<int64_t>(row) * stride_q + static_cast<int64_t>(col) * stride_k;
    if (kind == FlashMaskKind::kBool) {
      return base[off] ? 0.0f : -INFINITY;
    }
    if (kind == FlashMaskKind::kAdditiveF16) {
      return __half2float(reinterpret_cast<const __half*>(base)[off]) * kLog2e;
    }
    if (kind == FlashMaskKind::kAdditiveBF16) {
      return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(base)[off]) * kLog2e;
    }
    return reinterpret_cast<const float*>(base)[off] * kLog2e;
  }
};

__device__ __forceinline__ MaskView make_mask_view(const FlashMask& m, int b, int h) {
  const int64_t elem = m.kind == FlashMaskKind::kBool          ? 1
                      : m.kind == FlashMaskKind::kAdditiveF32 ? 4
                                                              : 2;
  const char* base = static_cast<const char*>(m.ptr) +
                     (static_cast<int64_t>(b) * m.stride_b + static_cast<int64_t>(h) * m.stride_h) * elem;
  return MaskView{m.kind, base, m.stride_q, m.stride_k};
}

__device__ __forceinline__ Dropout make_dropout(float p, const int64_t* rng_state, int bh) {
  Dropout d;
  const uint64_t seed = static_cast<uint64_t>(rng_state[0]);
  d.key = PhiloxKey{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  d.offset = static_cast<uint32_t>(rng_state[1]);
  d.bh = static_cast<uint32_t>(bh);
  d.threshold = static_cast<uint32_t>(p * 65536.0f);
  return d;
}

}  // namespace xpuruntime::cuda_kernels::flash
