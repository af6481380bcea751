// Warp-level building blocks of the FlashAttention-2 kernels: asynchronous
// global→shared copies, ldmatrix fragment loads, the m16n8k16 tensor-core MMA
// and the shared-memory swizzle. Raw PTX so nothing depends on CUTLASS/CuTe.
//
// Fragment layouts (PTX ISA, "mma.m16n8k16"): with g = lane / 4 and t = lane % 4,
//   A (16x16, row): a0 = (g, 2t..2t+1)  a1 = (g+8, 2t..)  a2 = (g, 8+2t..)  a3 = (g+8, 8+2t..)
//   B (16x8, col):  b0 = (k 2t..2t+1, n g)  b1 = (k 8+2t.., n g)
//   C (16x8, f32):  c0,c1 = (g, 2t..2t+1)   c2,c3 = (g+8, 2t..2t+1)
// so the C tiles of S = Q K^T, converted pairwise to 16-bit, are exactly the A
// fragments of P V (the register reuse FlashAttention-2 is built on).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace xpuruntime::cuda_kernels::flash {

// ---- shared memory tiles ------------------------------------------------------
// A tile row of D 16-bit elements is D/8 chunks of 16 bytes. Chunk c of row r is
// stored at chunk position c ^ (r % 8): the 8 rows one ldmatrix reads (same chunk
// column) then land in 8 different 16-byte bank groups, so neither the cp.async
// writes nor the ldmatrix reads conflict. D >= 64 (rows of 8 chunks or more).
// D = 32 (rows of 4 chunks, 64 bytes: two rows per 128-byte bank line) stores chunk
// c of row r at c ^ ((r / 2) % 4), which again spreads 8 consecutive rows of one
// chunk column over the 8 bank groups.
template <int kCols>
__device__ __forceinline__ int swz(int row, int col) {
  static_assert(kCols == 32 || kCols % 64 == 0, "swizzle needs rows of 4 or of 8k chunks");
  if constexpr (kCols == 32) {
    return row * kCols + (((col >> 3) ^ (row >> 1)) & 3) * 8 + (col & 7);
  } else {
    return row * kCols + ((((col >> 3) ^ row) & 7) | ((col >> 3) & ~7)) * 8 + (col & 7);
  }
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Fragment addresses split into a per-lane part computed once and a per-step
// constant applied with one XOR and one add. A thread's ldmatrix row is
// row_lane + row_off (row_off a multiple of 8, so row % 8 is the lane's) and its
// chunk is chunk_lane + chunk_off with disjoint bits (chunk_lane < 8 and
// chunk_off % 8 == 0, or chunk_lane in {0, 1} and chunk_off even). Tile rows are
// multiples of 128 bytes, so the swizzled chunk bits (address bits 4..6) can be
// XORed in directly. Without this split the compiler keeps dozens of hoisted
// loop-invariant addresses in registers and the kernels spill.
// With D = 32 the swizzled bits are address bits 4..5 (chunk_off < 4, and a row_off
// that is a multiple of 8 keeps (row / 2) % 4), so the same XOR applies.
template <int kCols>
__device__ __forceinline__ uint32_t swz_lane_addr(const void* tile, int row_lane, int chunk_lane) {
  if constexpr (kCols == 32) {
    return smem_addr(tile) + row_lane * (kCols * 2) + (((chunk_lane ^ (row_lane >> 1)) & 3) << 4);
  } else {
    return smem_addr(tile) + row_lane * (kCols * 2) + (((chunk_lane ^ row_lane) & 7) << 4);
  }
}
template <int kCols>
__device__ __forceinline__ uint32_t swz_at(uint32_t lane_addr, int row_off, int chunk_off) {
  return ((lane_addr + row_off * (kCols * 2)) ^ ((chunk_off & 7) << 4)) + (chunk_off & ~7) * 16;
}

// 16-byte asynchronous copy; with valid == false the destination is zero-filled
// (src-size 0) and nothing is read, which is how tile tails are padded.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)),
               "l"(gmem), "r"(src_size));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ---- fragment loads -----------------------------------------------------------
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// ---- tensor-core MMA: D = A * B + D (fp32 accumulate) --------------------------
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1);

template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4],
                                                  uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two fp32 values → one register of two 16-bit values (x in the low half).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float x, float y);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float x, float y) {
  __half2 h = __floats2half2_rn(x, y);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float x, float y) {
  __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  return *reinterpret_cast<uint32_t*>(&h);
}

template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t v);
template <>
__device__ __forceinline__ float2 unpack2<__half>(uint32_t v) {
  return __half22float2(*reinterpret_cast<__half2*>(&v));
}
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t v) {
  return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&v));
}

// Butterfly reductions over the 4 lanes of a quad (the lanes that share a row g).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

}  // namespace xpuruntime::cuda_kernels::flash
