// Hopper (sm_90a) attention forward with warpgroup MMA, for the plain case (no
// user mask, no dropout). Same contract and results as flash_fwd_kernel's
// kExtras=false variant: O and the natural-log lse, causal top-left aligned, GQA,
// any seqlen and b/h/s strides.
//
// One CTA = 128 query rows of one (batch, head) = 2 consumer warpgroups of 64
// rows (tile sizes and CTAs per SM per head dim: flash_fwd_sm90_launch.cuh). Per key block j (kBlockN keys) a warpgroup computes S = Q K_j^T with both
// operands K-major in 128-byte-swizzled shared memory (wgmma_ss), runs the
// online softmax on the fp32 accumulators, packs P to 16 bits in registers (the
// accumulator layout is the register A-operand layout, as with mma.sync) and
// computes O += P V_j with V MN-major from the same kind of tile (transpose bit),
// so V is never transposed explicitly.
//
// Pipelining inside a warpgroup (FlashAttention-3's intra-warpgroup overlap):
// iteration j issues S_j and then O += P_{j-1} V_{j-1}; the softmax of S_j runs
// while the tensor cores are still busy with the P V product, and O is rescaled
// once that product has landed.
//
// Loads: every thread issues 16-byte cp.async (any strides, zero-filled tails)
// for its share of each tile. K and V have kStages buffers each and are fetched
// kStages - 1 iterations ahead (with 2: K_{j+1} and V_j during iteration j).
// Completion and reuse go through mbarriers (a full and an empty one per buffer),
// not a CTA-wide barrier per iteration: the two warpgroups then drift out of
// phase, so one's softmax overlaps the other's products on the tensor cores.
// Measured on an H200 (D=128, S=4096, bf16): 435-468 TFLOP/s with a
// __syncthreads per iteration, 505-545 with the mbarriers; an explicit
// FlashAttention-3 ping-pong (named barriers ordering the warpgroups' GEMM issue)
// on top of that measured the same, so it is left out.
#pragma once

#include "backends/cuda/kernels/flash_v2/flash_common.cuh"
#include "backends/cuda/kernels/flash_v2/sm90/wgmma.cuh"

namespace xpuruntime::cuda_kernels::flash::sm90 {

template <typename T_, int kD_, int kBlockN_, int kStages_, int kMinBlocks_>
struct FwdSm90Config {
  using T = T_;
  static constexpr int kD = kD_;
  static constexpr int kBlockM = 128;  // 2 warpgroups x 64 rows
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kThreads = 256;
  // K/V buffers of each kind: blocks are fetched kStages - 1 iterations ahead.
  static constexpr int kStages = kStages_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr int kQBytes = kBlockM * kD * 2;
  static constexpr int kKVBytes = kBlockN * kD * 2;
  // Q, K[kStages], V[kStages], the mbarriers, plus slack to round the dynamic base
  // up to 1024 bytes.
  static constexpr int kSmemBytes = kQBytes + 2 * kStages * kKVBytes + 8 * (1 + 4 * kStages) + 1024;
  static_assert(kStages >= 2, "the loop overwrites a buffer only after a barrier has retired it");
  static_assert(kD == 64 || kD == 128, "head dims with a wgmma instance");
  static_assert(kBlockN == 64 || kBlockN == 128, "key block sizes with a wgmma instance");
};

__device__ __forceinline__ void cp_async_16_u32(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

// Byte offset of 16-byte chunk cc (of kD / 8) in row r of a kRows-row swizzled tile.
template <int kRows>
__device__ __forceinline__ uint32_t tile_chunk_off(int r, int cc) {
  return (cc >> 3) * (kRows * 128) + r * 128 + (((cc & 7) ^ (r & 7)) << 4);
}

// Copies rows [row0, row0 + kRows) of a [rows_valid x kD] matrix (row stride in
// elements) into a swizzled tile; rows past rows_valid are zero-filled, so padded
// scores stay finite and padded values add nothing. A thread keeps one chunk
// column and a row that steps by a multiple of 8, so its swizzle is fixed.
template <int kD, int kRows, int kThreads, typename T>
__device__ __forceinline__ void load_tile_sw128(uint32_t tile, const T* gmem, int64_t row_stride, int row0,
                                                int rows_valid, int tid) {
  constexpr int kChunksPerRow = kD / 8;
  constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static_assert(kRowsPerPass % 8 == 0 && kRows % kRowsPerPass == 0, "tile rows must split evenly");
  const int r0 = tid / kChunksPerRow;
  const int cc = tid % kChunksPerRow;
  const uint32_t dst = tile + tile_chunk_off<kRows>(r0, cc);
  const T* src = gmem + static_cast<int64_t>(row0 + r0) * row_stride + cc * 8;
  const int64_t step = static_cast<int64_t>(kRowsPerPass) * row_stride;
#pragma unroll
  for (int i = 0; i < kRows / kRowsPerPass; ++i) {
    const bool valid = row0 + r0 + i * kRowsPerPass < rows_valid;
    cp_async_16_u32(dst + i * kRowsPerPass * 128, valid ? src : gmem, valid);
    src += step;
  }
}

// Online softmax of one key block for a thread's two rows (hh = 0: row, 1: row + 8).
// Maxima stay in the raw score domain so p = exp2(s * scale_log2 - m * scale_log2)
// is one FFMA and one ex2 (needs scale > 0, which the dispatcher checks).
template <bool kMask, int kSN>
__device__ __forceinline__ void softmax_block(float (&s)[kSN], float (&row_max)[2], float (&row_sum)[2],
                                              float (&corr)[2], float scale_log2, int row, int col0,
                                              int seqlen_k, bool causal) {
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float mx = row_max[hh];
#pragma unroll
    for (int c = 0; c < kSN / 4; ++c) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = s[4 * c + 2 * hh + e];
        if constexpr (kMask) {
          const int col = col0 + 8 * c + e;
          if (col >= seqlen_k || (causal && col > row + 8 * hh)) x = -INFINITY;
        }
        mx = fmaxf(mx, x);
      }
    }
    mx = quad_max(mx);
    // A row with no visible key so far keeps max -inf; use 0 so exp2(-inf - 0) = 0
    // instead of NaN.
    const float m_scaled = mx == -INFINITY ? 0.0f : mx * scale_log2;
    corr[hh] = fast_exp2(row_max[hh] * scale_log2 - m_scaled);
    row_max[hh] = mx;
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < kSN / 4; ++c) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = s[4 * c + 2 * hh + e];
        x = fast_exp2(fmaf(x, scale_log2, -m_scaled));
        sum += x;
      }
    }
    row_sum[hh] = row_sum[hh] * corr[hh] + sum;  // per-lane partial; quad-reduced at the end
  }
}

// Accumulator pairs → register A fragments of O += P V (k16 step ks covers
// accumulator columns 16 ks .. 16 ks + 15, i.e. d[8 ks .. 8 ks + 7]).
template <typename T, int kSN>
__device__ __forceinline__ void pack_p(const float (&s)[kSN], uint32_t (&p)[kSN / 8][4]) {
#pragma unroll
  for (int ks = 0; ks < kSN / 8; ++ks) {
#pragma unroll
    for (int r = 0; r < 4; ++r) p[ks][r] = pack2<T>(s[8 * ks + 2 * r], s[8 * ks + 2 * r + 1]);
  }
}

template <typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    flash_fwd_sm90_kernel(const __grid_constant__ FlashFwdArgs p) {
  using T = typename Cfg::T;
  constexpr int kD = Cfg::kD, kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN;
  constexpr int kThreads = Cfg::kThreads, kKVBytes = Cfg::kKVBytes, kStages = Cfg::kStages;
  constexpr int kSN = kBlockN / 2;  // S accumulators per thread (m64nBlockN)
  constexpr int kON = kD / 2;       // O accumulators per thread (m64nD)
  constexpr int kKSteps = kBlockN / 16;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw_addr = smem_addr(smem_raw);
  const uint32_t sQ = (raw_addr + 1023u) & ~1023u;  // swizzle atoms need 1024-byte alignment
  const uint32_t sK = sQ + Cfg::kQBytes;
  const uint32_t sV = sK + kStages * kKVBytes;
  unsigned char* sQ_ptr = smem_raw + (sQ - raw_addr);

  const FlashShape sh = p.shape;
  // Longest (causal) row blocks first, so the tail of the grid is short work.
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (sh.heads_q / sh.heads_kv);
  const int m0 = m_block * kBlockM;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2;
  const int g = lane >> 2, t = lane & 3;
  const int row_local = wg * 64 + (warp & 3) * 16 + g;  // + 8 for the second row

  const T* q = static_cast<const T*>(p.q) + b * p.q_stride.b + h * p.q_stride.h;
  const T* k = static_cast<const T*>(p.k) + b * p.k_stride.b + hk * p.k_stride.h;
  const T* v = static_cast<const T*>(p.v) + b * p.v_stride.b + hk * p.v_stride.h;
  T* o = static_cast<T*>(p.o) + b * p.o_stride.b + h * p.o_stride.h;
  const bool causal = p.causal;

  int n_blocks = cdiv(sh.seqlen_k, kBlockN);
  if (causal) n_blocks = min(n_blocks, cdiv(m0 + kBlockM, kBlockN));  // >= 1 (m0 < seqlen_q)

  // Barriers, 8 bytes each after the tiles: Q full, K full[kStages], V full[kStages],
  // K empty[kStages], V empty[kStages]. Block x lives in buffer x % kStages; its
  // full barrier completes phase x / kStages once all 256 threads' copies landed,
  // its empty barrier once all 256 threads' wgmma reads of it retired.
  const uint32_t bars = sV + kStages * kKVBytes;
  const uint32_t full_q = bars, full_k = bars + 8, full_v = full_k + 8 * kStages;
  const uint32_t empty_k = full_v + 8 * kStages, empty_v = empty_k + 8 * kStages;
  if (tid == 0) {
    mbar_init(full_q, kThreads);
#pragma unroll
    for (int i = 0; i < 4 * kStages; ++i) mbar_init(full_k + 8 * i, kThreads);
  }
  __syncthreads();

  // Every thread copies its share of each tile and arrives (when its copies land)
  // on the tile's full barrier; before overwriting a buffer it waits until the
  // buffer's previous block has been read by both warpgroups.
  auto load_k = [&](int x) {
    if (x >= n_blocks) return;
    const int slot = x % kStages, round = x / kStages;
    if (round > 0) mbar_wait(empty_k + 8 * slot, (round - 1) & 1);
    load_tile_sw128<kD, kBlockN, kThreads>(sK + slot * kKVBytes, k, p.k_stride.s, x * kBlockN, sh.seqlen_k,
                                           tid);
    cp_async_mbar_arrive(full_k + 8 * slot);
  };
  auto load_v = [&](int x) {
    if (x < 0 || x >= n_blocks) return;
    const int slot = x % kStages, round = x / kStages;
    if (round > 0) mbar_wait(empty_v + 8 * slot, (round - 1) & 1);
    load_tile_sw128<kD, kBlockN, kThreads>(sV + slot * kKVBytes, v, p.v_stride.s, x * kBlockN, sh.seqlen_k,
                                           tid);
    cp_async_mbar_arrive(full_v + 8 * slot);
  };
  // Consumers: wait for the copies, then order them before the async-proxy reads.
  auto wait_k = [&](int x) {
    mbar_wait(full_k + 8 * (x % kStages), (x / kStages) & 1);
    fence_proxy_async();
  };
  auto wait_v = [&](int x) {
    mbar_wait(full_v + 8 * (x % kStages), (x / kStages) & 1);
    fence_proxy_async();
  };
  // Iteration i issues K_{i + kStages - 1} and V_{i + kStages - 2}; the prologue
  // covers i < 0.
  load_tile_sw128<kD, kBlockM, kThreads>(sQ, q, p.q_stride.s, m0, sh.seqlen_q, tid);
  cp_async_mbar_arrive(full_q);
#pragma unroll
  for (int i = -(kStages - 1); i < 0; ++i) {
    load_k(i + kStages - 1);
    load_v(i + kStages - 2);
  }

  const float scale_log2 = p.scale * kLog2e;
  // K-major operands: 8-row groups 1024 B apart (LBO unused with this swizzle).
  const uint64_t q_desc = make_desc(sQ + wg * 64 * 128, 16, 1024);
  const uint64_t k_desc = make_desc(sK, 16, 1024);
  // MN-major V: 64-wide d panels kBlockN lines apart, 8-key groups 1024 B apart.
  const uint64_t v_desc = make_desc(sV, kBlockN * 128, 1024);

  auto gemm_s = [&](float(&s)[kSN], int buf) {
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      // d columns 16 kk ..: panel kk / 4 of the tile, then 32 bytes per k16 step.
      const uint32_t step = (kk & 3) * 32;
      wgmma_ss<T, kBlockN>(s, desc_add(q_desc, (kk >> 2) * (kBlockM * 128) + step),
                           desc_add(k_desc, buf * kKVBytes + (kk >> 2) * (kBlockN * 128) + step),
                           kk > 0 ? 1 : 0);
    }
  };
  float acc_o[kON];
#pragma unroll
  for (int i = 0; i < kON; ++i) acc_o[i] = 0.0f;
  uint32_t p_frag[kKSteps][4];
  auto gemm_o = [&](int buf) {
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      wgmma_rs_tb<T, kD>(acc_o, p_frag[ks], desc_add(v_desc, buf * kKVBytes + ks * 16 * 128));
    }
  };

  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  const int row = m0 + row_local;
  auto softmax = [&](float(&s)[kSN], float(&corr)[2], int n0) {
    const bool need_mask = n0 + kBlockN > sh.seqlen_k || (causal && n0 + kBlockN - 1 > m0);
    if (need_mask) {
      softmax_block<true>(s, row_max, row_sum, corr, scale_log2, row, n0 + 2 * t, sh.seqlen_k, causal);
    } else {
      softmax_block<false>(s, row_max, row_sum, corr, scale_log2, row, n0 + 2 * t, sh.seqlen_k, causal);
    }
  };

  // ---- key block 0: S_0 and its softmax (nothing to overlap with yet) --------------
  mbar_wait(full_q, 0);
  wait_k(0);
  {
    float s[kSN];
    wgmma_fence();
    gemm_s(s, 0);
    wgmma_commit();
    load_k(kStages - 1);
    load_v(kStages - 2);
    wgmma_wait<0>();
    fence_regs(s);
    mbar_arrive(empty_k);
    float corr[2];
    softmax(s, corr, 0);
    pack_p<T>(s, p_frag);
  }

  // ---- key blocks 1..n-1: S_j, then P_{j-1} V_{j-1} behind it ----------------------
  for (int j = 1; j < n_blocks; ++j) {
    const int n0 = j * kBlockN;
    wait_k(j);
    wait_v(j - 1);
    float s[kSN];
    wgmma_fence();
    gemm_s(s, j % kStages);
    wgmma_commit();
    gemm_o((j - 1) % kStages);
    wgmma_commit();
    // The next copies go out behind this batch: their buffers' previous blocks
    // (K_{j-1}, V_{j-2}) are normally retired by both warpgroups by now.
    load_k(j + kStages - 1);
    load_v(j + kStages - 2);
    wgmma_wait<1>();  // S_j done; P V may still run
    fence_regs(s);
    mbar_arrive(empty_k + 8 * (j % kStages));
    float corr[2];
    softmax(s, corr, n0);
    uint32_t p_next[kKSteps][4];
    pack_p<T>(s, p_next);
    wgmma_wait<0>();  // P_{j-1} V_{j-1} done: O and the old P registers are free
    fence_regs(acc_o);
    fence_regs(p_frag);
    mbar_arrive(empty_v + 8 * ((j - 1) % kStages));
#pragma unroll
    for (int i = 0; i < kON; ++i) acc_o[i] *= corr[(i >> 1) & 1];
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
#pragma unroll
      for (int r = 0; r < 4; ++r) p_frag[ks][r] = p_next[ks][r];
    }
  }

  // ---- the last P V ------------------------------------------------------------------
  wait_v(n_blocks - 1);
  wgmma_fence();
  gemm_o((n_blocks - 1) % kStages);
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(acc_o);
  fence_regs(p_frag);

  // ---- epilogue: normalise, stage O in this warp's Q rows, store 16-byte chunks -----
  // Q rows are only read by this warpgroup's S products, all retired above.
  float* lse = p.lse + (static_cast<int64_t>(b) * sh.heads_q + h) * sh.seqlen_q;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const float l = quad_sum(row_sum[hh]);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const bool zero_row = p.nan_rows_zero && !(l > 0.0f);  // see flash_fwd_kernel.cuh
    const int r = row_local + 8 * hh;
#pragma unroll
    for (int c = 0; c < kD / 8; ++c) {
      *reinterpret_cast<uint32_t*>(sQ_ptr + tile_chunk_off<kBlockM>(r, c) + 4 * t) =
          zero_row ? pack2<T>(0.0f, 0.0f)
                   : pack2<T>(acc_o[4 * c + 2 * hh] * inv, acc_o[4 * c + 2 * hh + 1] * inv);
    }
    if (t == 0 && row + 8 * hh < sh.seqlen_q) {
      // A row that saw no key gets +inf, so the backward pass computes P = 0 for it.
      lse[row + 8 * hh] =
          (l > 0.0f && row_max[hh] != -INFINITY) ? (row_max[hh] * scale_log2 + __log2f(l)) * kLn2 : INFINITY;
    }
  }
  __syncwarp();  // each warp reads back only the 16 rows it wrote
  constexpr int kChunksPerRow = kD / 8;
  const int warp_row0 = wg * 64 + (warp & 3) * 16;
#pragma unroll
  for (int i = 0; i < 16 * kChunksPerRow / 32; ++i) {
    const int c = lane + i * 32;
    const int r = warp_row0 + c / kChunksPerRow;
    const int cc = c % kChunksPerRow;
    if (m0 + r < sh.seqlen_q) {
      *reinterpret_cast<uint4*>(o + static_cast<int64_t>(m0 + r) * p.o_stride.s + cc * 8) =
          *reinterpret_cast<const uint4*>(sQ_ptr + tile_chunk_off<kBlockM>(r, cc));
    }
  }
}

}  // namespace xpuruntime::cuda_kernels::flash::sm90
