// Counter-based dropout mask shared by the attention forward and backward kernels
// (and mirrored bit for bit by the Python CPU reference, xpuruntime/pytorch/
// ops/_philox.py). Philox4x32-10 (Salmon et al., SC'11) keyed by the 64-bit seed;
// the counter is (key column / 8, query row, batch*heads + head, offset), so one
// call yields the eight 16-bit uniforms of 8 consecutive key columns of one row.
// The mask is a pure function of (seed, offset, bh, row, col): forward and
// backward regenerate it with different thread layouts and always agree.
#pragma once

#include <cstdint>

namespace xpuruntime::cuda_kernels::flash {

struct PhiloxKey {
  uint32_t k0, k1;
};

__host__ __device__ __forceinline__ uint4 philox4x32_10(uint4 c, PhiloxKey key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t k0 = key.k0, k1 = key.k1;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c.x;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c.z;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = make_uint4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// Dropout state for one (batch, head): keep an element when its 16-bit uniform
// is >= threshold (threshold = floor(p * 65536)); kept values are scaled by 1/(1-p).
struct Dropout {
  PhiloxKey key;
  uint32_t bh;
  uint32_t offset;
  uint32_t threshold;

  // The 8 uniforms of columns [col8*8, col8*8+8) of `row`, packed two per word.
  __device__ __forceinline__ uint4 bits(int row, int col8) const {
    return philox4x32_10(make_uint4(static_cast<uint32_t>(col8), static_cast<uint32_t>(row), bh,
                                    offset),
                         key);
  }
  __device__ __forceinline__ static uint32_t pick(const uint4& r, int e) {
    const uint32_t w = (e >> 1) == 0 ? r.x : (e >> 1) == 1 ? r.y : (e >> 1) == 2 ? r.z : r.w;
    return (e & 1) ? (w >> 16) : (w & 0xFFFFu);
  }
  __device__ __forceinline__ bool keep(int row, int col) const {
    return pick(bits(row, col >> 3), col & 7) >= threshold;
  }
};

}  // namespace xpuruntime::cuda_kernels::flash
