// FlashAttention-2 backward. One CTA owns kBlockN key/value rows of one (batch,
// query head) and walks the query blocks: it recomputes P from Q, K and the saved
// logsumexp, and accumulates dK and dV in registers; dQ is summed across CTAs in
// an fp32 buffer with atomic adds (and converted by a small kernel afterwards).
//
// Each warp owns 16 key rows and computes the transposed products S^T = K Q^T and
// dP^T = V dO^T, so P^T and dS^T come out in the accumulator layout that is
// directly the A operand of dV += P^T dO and dK += dS^T Q. dS^T also goes through
// shared memory so that the warps, re-split over query rows, compute dQ = dS K.
//
// With D_i = rowsum(dO_i * O_i) (computed by flash_bwd_dot_do_o first):
//   dV = Pd^T dO,   dP = (dO V^T) * Z / (1 - p),   dS = P * (dP - D),
//   dQ = scale * dS K,   dK = scale * dS^T Q       (Pd: P after dropout mask Z)
#pragma once

#include "backends/cuda/kernels/flash_v2/flash_common.cuh"

// Warps per CTA (16 key rows each). 8 warps (128 key rows) halve the dQ atomics
// and the Q/dO re-reads per key row compared with 4.
#ifndef XRT_FLASH_BWD_WARPS
#define XRT_FLASH_BWD_WARPS 8
#endif

namespace xpuruntime::cuda_kernels::flash {

template <typename T_, int kD_, bool kExtras_>
struct BwdConfig {
  using T = T_;
  static constexpr int kD = kD_;
  static constexpr int kNWarps = XRT_FLASH_BWD_WARPS;
  static constexpr int kBlockM = 64;             // query rows per step
  static constexpr int kBlockN = 16 * kNWarps;  // key rows per CTA: 16 per warp
  static constexpr int kThreads = kNWarps * 32;
  // dQ = dS K: kQGroups groups of 16 query rows; the warps beyond split the head dim.
  static constexpr int kQGroups = kBlockM / 16;
  static constexpr int kDqCols = kD / (kNWarps / kQGroups);
  static constexpr int kDqPass = kDqCols < 64 ? kDqCols : 64;  // columns per accumulator pass
  static constexpr bool kExtras = kExtras_;
  static constexpr int kMTiles = kBlockM / 8;  // 8-column tiles of S^T per warp
  static constexpr int kDTiles = kD / 8;
  static constexpr int kElems =
      2 * kBlockN * kD + 4 * kBlockM * kD + kBlockN * kBlockM;  // K, V, 2x(Q, dO), dS
  static constexpr int kSmemBytes = kElems * static_cast<int>(sizeof(T)) + 4 * kBlockM * 4;
  static_assert(kNWarps % kQGroups == 0 && kDqCols % 32 == 0, "dQ split over the warps");
};

template <typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) flash_bwd_kernel(const __grid_constant__ FlashBwdArgs p) {
  using T = typename Cfg::T;
  constexpr int kD = Cfg::kD, kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN;
  constexpr int kThreads = Cfg::kThreads, kMTiles = Cfg::kMTiles, kDTiles = Cfg::kDTiles;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + kBlockN * kD;
  T* sQ0 = sV + kBlockN * kD;  // two buffers each of Q and dO
  T* sdO0 = sQ0 + 2 * kBlockM * kD;
  T* sdS = sdO0 + 2 * kBlockM * kD;  // dS^T [kBlockN][kBlockM]
  float* sLse0 = reinterpret_cast<float*>(sdS + kBlockN * kBlockM);  // 2 x kBlockM, log2 domain
  float* sDsum0 = sLse0 + 2 * kBlockM;                                 // 2 x kBlockM

  const FlashShape sh = p.shape;
  const int n_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (sh.heads_q / sh.heads_kv);
  const int n0 = n_block * kBlockN;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t bh = static_cast<int64_t>(b) * sh.heads_q + h;

  const T* q = static_cast<const T*>(p.q) + b * p.q_stride.b + h * p.q_stride.h;
  const T* k = static_cast<const T*>(p.k) + b * p.k_stride.b + hk * p.k_stride.h;
  const T* v = static_cast<const T*>(p.v) + b * p.v_stride.b + hk * p.v_stride.h;
  const T* dout = static_cast<const T*>(p.dout) + b * p.do_stride.b + h * p.do_stride.h;
  const float* lse = p.lse + bh * sh.seqlen_q;
  const float* dsum = p.dsum + bh * sh.seqlen_q;
  float* dq_accum = p.dq_accum + bh * sh.seqlen_q * kD;

  const int m_begin = p.causal ? n0 / kBlockM : 0;
  const int m_end = cdiv(sh.seqlen_q, kBlockM);

  auto load_q_block = [&](int mb, int buf) {
    const int m0 = mb * kBlockM;
    load_tile<T, kD, kBlockM, kThreads>(sQ0 + buf * kBlockM * kD, q, p.q_stride.s, m0,
                                        sh.seqlen_q, tid);
    load_tile<T, kD, kBlockM, kThreads>(sdO0 + buf * kBlockM * kD, dout, p.do_stride.s, m0,
                                        sh.seqlen_q, tid);
    if (tid < kBlockM) {
      const int row = m0 + tid;
      // Padding rows get lse = +inf, hence P = 0: they add nothing anywhere.
      sLse0[buf * kBlockM + tid] = row < sh.seqlen_q ? lse[row] * kLog2e : INFINITY;
      sDsum0[buf * kBlockM + tid] = row < sh.seqlen_q ? dsum[row] : 0.0f;
    }
  };

  load_tile<T, kD, kBlockN, kThreads>(sK, k, p.k_stride.s, n0, sh.seqlen_k, tid);
  load_tile<T, kD, kBlockN, kThreads>(sV, v, p.v_stride.s, n0, sh.seqlen_k, tid);
  if (m_begin < m_end) load_q_block(m_begin, 0);
  cp_async_commit();

  MaskView mask{};
  Dropout drop{};
  bool has_mask = false, has_dropout = false;
  float drop_scale = 1.0f;
  if constexpr (Cfg::kExtras) {
    has_mask = p.mask.kind != FlashMaskKind::kNone;
    if (has_mask) mask = make_mask_view(p.mask, b, h);
    has_dropout = p.dropout_p > 0.0f;
    if (has_dropout) {
      drop = make_dropout(p.dropout_p, p.rng_state, static_cast<int>(bh));
      drop_scale = 1.0f / (1.0f - p.dropout_p);
    }
  }
  const float scale_log2 = p.scale * kLog2e;

  float acc_dk[kDTiles][4], acc_dv[kDTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dk[dt][e] = acc_dv[dt][e] = 0.0f;
  }

  const int warp_row0 = warp * 16;  // this warp's key rows within the block
  // Per-lane ldmatrix addresses (see swz_lane_addr). A operands: this warp's
  // K/V rows and (for dQ) the transposed dS^T tile; B operands: Q/dO
  // non-transposed (S^T, dP^T), Q/dO/K transposed (dK, dV, dQ).
  const uint32_t k_a_addr = swz_lane_addr<kD>(sK, warp_row0 + (lane & 15), lane >> 4);
  const uint32_t v_a_addr = swz_lane_addr<kD>(sV, warp_row0 + (lane & 15), lane >> 4);
  const int b_row_lane = (lane & 7) + (lane >> 4) * 8, b_chunk_lane = (lane >> 3) & 1;
  const uint32_t q_b_addr0 = swz_lane_addr<kD>(sQ0, b_row_lane, b_chunk_lane);
  const uint32_t do_b_addr0 = swz_lane_addr<kD>(sdO0, b_row_lane, b_chunk_lane);
  const int bt_row_lane = (lane & 7) + ((lane >> 3) & 1) * 8, bt_chunk_lane = lane >> 4;
  const uint32_t q_bt_addr0 = swz_lane_addr<kD>(sQ0, bt_row_lane, bt_chunk_lane);
  const uint32_t do_bt_addr0 = swz_lane_addr<kD>(sdO0, bt_row_lane, bt_chunk_lane);
  const uint32_t k_bt_addr = swz_lane_addr<kD>(sK, bt_row_lane, bt_chunk_lane);
  // dQ step: this warp's 16 query rows (q_row0) and head-dim columns (dq_col0 ..).
  const int q_row0 = (warp % Cfg::kQGroups) * 16;
  const int dq_col0 = (warp / Cfg::kQGroups) * Cfg::kDqCols;
  const int quad = lane >> 3;
  const uint32_t ds_at_addr =
      swz_lane_addr<kBlockM>(sdS, (lane & 7) + (quad >> 1) * 8, (q_row0 >> 3) + (quad & 1));
  // dq_col0 / 8 only has bits that the per-step chunk offsets never use (see swz_at).
  const uint32_t k_dq_addr = swz_at<kD>(k_bt_addr, 0, dq_col0 / 8);
  for (int mb = m_begin; mb < m_end; ++mb) {
    const int buf = (mb - m_begin) & 1;
    const int m0 = mb * kBlockM;
    constexpr uint32_t kTileBytes = kBlockM * kD * 2;
    const uint32_t q_b_addr = q_b_addr0 + buf * kTileBytes, do_b_addr = do_b_addr0 + buf * kTileBytes;
    const uint32_t q_bt_addr = q_bt_addr0 + buf * kTileBytes, do_bt_addr = do_bt_addr0 + buf * kTileBytes;
    const float* sLse = sLse0 + buf * kBlockM;
    const float* sDsum = sDsum0 + buf * kBlockM;
    cp_async_wait<0>();
    __syncthreads();  // Q/dO[mb] visible; every warp is done with step mb-1
    if (mb + 1 < m_end) load_q_block(mb + 1, buf ^ 1);
    cp_async_commit();

    // ---- S^T = K Q^T and dP^T = V dO^T (16 key rows x kBlockM query columns) ----
    float acc_s[kMTiles][4], acc_dp[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[mt][e] = acc_dp[mt][e] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      uint32_t ak[4], av[4];
      ldmatrix_x4(ak, swz_at<kD>(k_a_addr, 0, 2 * kk));
      ldmatrix_x4(av, swz_at<kD>(v_a_addr, 0, 2 * kk));
#pragma unroll
      for (int mp = 0; mp < kMTiles / 2; ++mp) {
        uint32_t bq[4], bo[4];
        ldmatrix_x4(bq, swz_at<kD>(q_b_addr, mp * 16, 2 * kk));
        ldmatrix_x4(bo, swz_at<kD>(do_b_addr, mp * 16, 2 * kk));
        mma_16816<T>(acc_s[2 * mp], ak, bq[0], bq[1]);
        mma_16816<T>(acc_s[2 * mp + 1], ak, bq[2], bq[3]);
        mma_16816<T>(acc_dp[2 * mp], av, bo[0], bo[1]);
        mma_16816<T>(acc_dp[2 * mp + 1], av, bo[2], bo[3]);
      }
    }

    // ---- P^T (acc_s) and dS^T (acc_dp), elementwise --------------------------------
    const bool bounds_mask = (n0 + kBlockN > sh.seqlen_k) || (p.causal && n0 + kBlockN - 1 > m0);
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col_local = mt * 8 + 2 * t + (e & 1);  // query row within the block
        const int row = m0 + col_local;                   // query index i
        const int col = n0 + warp_row0 + g + (e >> 1) * 8;  // key index j
        float x = acc_s[mt][e] * scale_log2;
        if (bounds_mask && (col >= sh.seqlen_k || (p.causal && col > row))) x = -INFINITY;
        if constexpr (Cfg::kExtras) {
          if (has_mask && row < sh.seqlen_q && col < sh.seqlen_k) x += mask.log2_term(row, col);
        }
        const float pe = fast_exp2(x - sLse[col_local]);
        float dpe = acc_dp[mt][e];
        float pd = pe;
        if constexpr (Cfg::kExtras) {
          if (has_dropout) {
            const bool keep = Dropout::pick(drop.bits(row, col >> 3), col & 7) >= drop.threshold;
            dpe = keep ? dpe * drop_scale : 0.0f;
            pd = keep ? pe * drop_scale : 0.0f;
          }
        }
        acc_dp[mt][e] = pe * (dpe - sDsum[col_local]);  // dS^T
        acc_s[mt][e] = pd;                              // P^T after dropout
      }
    }

    // dS^T also goes to shared memory for the dQ product below.
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        *reinterpret_cast<uint32_t*>(sdS + swz<kBlockM>(warp_row0 + g + hh * 8, mt * 8 + 2 * t)) =
            pack2<T>(acc_dp[mt][2 * hh], acc_dp[mt][2 * hh + 1]);
      }
    }

    // ---- dV += Pd^T dO, dK += dS^T Q (k-dim: the kBlockM query rows) ------------------
#pragma unroll
    for (int ks = 0; ks < kBlockM / 16; ++ks) {
      uint32_t ap[4], ads[4];
      ap[0] = pack2<T>(acc_s[2 * ks][0], acc_s[2 * ks][1]);
      ap[1] = pack2<T>(acc_s[2 * ks][2], acc_s[2 * ks][3]);
      ap[2] = pack2<T>(acc_s[2 * ks + 1][0], acc_s[2 * ks + 1][1]);
      ap[3] = pack2<T>(acc_s[2 * ks + 1][2], acc_s[2 * ks + 1][3]);
      ads[0] = pack2<T>(acc_dp[2 * ks][0], acc_dp[2 * ks][1]);
      ads[1] = pack2<T>(acc_dp[2 * ks][2], acc_dp[2 * ks][3]);
      ads[2] = pack2<T>(acc_dp[2 * ks + 1][0], acc_dp[2 * ks + 1][1]);
      ads[3] = pack2<T>(acc_dp[2 * ks + 1][2], acc_dp[2 * ks + 1][3]);
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        uint32_t bo[4], bq[4];
        ldmatrix_x4_trans(bo, swz_at<kD>(do_bt_addr, ks * 16, 2 * dp));
        ldmatrix_x4_trans(bq, swz_at<kD>(q_bt_addr, ks * 16, 2 * dp));
        mma_16816<T>(acc_dv[2 * dp], ap, bo[0], bo[1]);
        mma_16816<T>(acc_dv[2 * dp + 1], ap, bo[2], bo[3]);
        mma_16816<T>(acc_dk[2 * dp], ads, bq[0], bq[1]);
        mma_16816<T>(acc_dk[2 * dp + 1], ads, bq[2], bq[3]);
      }
    }
    __syncthreads();  // dS^T complete in shared memory

    // ---- dQ[m0 + q_row0 .. +16, c0 .. c0 + kDqCols) += scale * dS K -----------------
    // (k-dim: the kBlockN key rows). Warps split the query rows in 16-row groups and,
    // with more than kBlockM/16 warps, the head dimension too.
#pragma unroll
    for (int pass = 0; pass < Cfg::kDqCols / Cfg::kDqPass; ++pass) {
      constexpr int kTiles = Cfg::kDqPass / 8;
      float acc_dq[kTiles][4];
#pragma unroll
      for (int dt = 0; dt < kTiles; ++dt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_dq[dt][e] = 0.0f;
      }
#pragma unroll
      for (int ks = 0; ks < kBlockN / 16; ++ks) {
        uint32_t a[4];
        ldmatrix_x4_trans(a, swz_at<kBlockM>(ds_at_addr, ks * 16, 0));
#pragma unroll
        for (int dp = 0; dp < kTiles / 2; ++dp) {
          uint32_t bk[4];
          ldmatrix_x4_trans(bk, swz_at<kD>(k_dq_addr, ks * 16, pass * (Cfg::kDqPass / 8) + 2 * dp));
          mma_16816<T>(acc_dq[2 * dp], a, bk[0], bk[1]);
          mma_16816<T>(acc_dq[2 * dp + 1], a, bk[2], bk[3]);
        }
      }
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int row = m0 + q_row0 + g + hh * 8;
        if (row < sh.seqlen_q) {
          float* dst = dq_accum + static_cast<int64_t>(row) * kD + dq_col0 + pass * Cfg::kDqPass + 2 * t;
#pragma unroll
          for (int dt = 0; dt < kTiles; ++dt) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            atomicAdd(reinterpret_cast<float2*>(dst + dt * 8),
                      make_float2(acc_dq[dt][2 * hh] * p.scale, acc_dq[dt][2 * hh + 1] * p.scale));
#else
            atomicAdd(dst + dt * 8, acc_dq[dt][2 * hh] * p.scale);
            atomicAdd(dst + dt * 8 + 1, acc_dq[dt][2 * hh + 1] * p.scale);
#endif
          }
        }
      }
    }
  }

  // ---- epilogue: dK (scaled) and dV of this query head's view of the key rows ----
  cp_async_wait<0>();  // with no query block the K/V copies may still be in flight
  T* dk = static_cast<T*>(p.dk) + b * p.dk_stride.b + h * p.dk_stride.h;
  T* dv = static_cast<T*>(p.dv) + b * p.dv_stride.b + h * p.dv_stride.h;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int row = n0 + warp_row0 + g + hh * 8;
    if (row < sh.seqlen_k) {
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        const int col = dt * 8 + 2 * t;
        *reinterpret_cast<uint32_t*>(dk + static_cast<int64_t>(row) * p.dk_stride.s + col) =
            pack2<T>(acc_dk[dt][2 * hh] * p.scale, acc_dk[dt][2 * hh + 1] * p.scale);
        *reinterpret_cast<uint32_t*>(dv + static_cast<int64_t>(row) * p.dv_stride.s + col) =
            pack2<T>(acc_dv[dt][2 * hh], acc_dv[dt][2 * hh + 1]);
      }
    }
  }
}

// D_i = sum_d dO[i, d] * O[i, d] in fp32, kD/8 lanes per query row.
template <typename T, int kD>
__global__ void flash_bwd_dot_do_o(const __grid_constant__ FlashBwdArgs p) {
  // A row is kD/8 16-byte chunks: that many lanes share a row (one chunk each) and a
  // warp takes 32/(kD/8) rows, so every lane loads (one warp per row left 24 of 32
  // lanes idle at D=64 and the kernel ran at a third of cuDNN's bandwidth).
  constexpr int kLanes = kD / 8;
  constexpr int kRowsPerWarp = 32 / kLanes;
  static_assert(kD % 8 == 0 && kLanes <= 32 && 32 % kLanes == 0, "a row's chunks fill a lane group");
  const FlashShape sh = p.shape;
  const int lane = threadIdx.x & 31, chunk = lane % kLanes;
  const int64_t warp_id = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  const int64_t row_id = warp_id * kRowsPerWarp + lane / kLanes;
  const int64_t rows = static_cast<int64_t>(sh.batch) * sh.heads_q * sh.seqlen_q;
  float acc = 0.0f;
  if (row_id < rows) {  // no early return: every lane takes part in the shuffles below
    const int i = static_cast<int>(row_id % sh.seqlen_q);
    const int64_t bh = row_id / sh.seqlen_q;
    const int h = static_cast<int>(bh % sh.heads_q), b = static_cast<int>(bh / sh.heads_q);
    const T* o = static_cast<const T*>(p.o) + b * p.o_stride.b + h * p.o_stride.h + i * p.o_stride.s;
    const T* d = static_cast<const T*>(p.dout) + b * p.do_stride.b + h * p.do_stride.h +
                 i * p.do_stride.s;
    const uint4 ov = *reinterpret_cast<const uint4*>(o + chunk * 8);
    const uint4 dv = *reinterpret_cast<const uint4*>(d + chunk * 8);
    const uint32_t* ow = reinterpret_cast<const uint32_t*>(&ov);
    const uint32_t* dw = reinterpret_cast<const uint32_t*>(&dv);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float2 of = unpack2<T>(ow[w]), df = unpack2<T>(dw[w]);
      acc += of.x * df.x + of.y * df.y;
    }
  }
  // xor offsets below kLanes stay inside the lane group of one row
#pragma unroll
  for (int off = kLanes / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (row_id < rows && chunk == 0) p.dsum[row_id] = acc;
}

// dq = dq_accum (already scaled) converted to T, 8 elements per thread.
template <typename T, int kD>
__global__ void flash_bwd_convert_dq(const __grid_constant__ FlashBwdArgs p) {
  const FlashShape sh = p.shape;
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunks = static_cast<int64_t>(sh.batch) * sh.heads_q * sh.seqlen_q * (kD / 8);
  if (chunk >= chunks) return;
  const int c = static_cast<int>(chunk % (kD / 8));
  const int64_t row_id = chunk / (kD / 8);
  const int i = static_cast<int>(row_id % sh.seqlen_q);
  const int64_t bh = row_id / sh.seqlen_q;
  const int h = static_cast<int>(bh % sh.heads_q), b = static_cast<int>(bh / sh.heads_q);
  const float4* src = reinterpret_cast<const float4*>(p.dq_accum + row_id * kD + c * 8);
  const float4 x0 = src[0], x1 = src[1];
  uint4 out;
  out.x = pack2<T>(x0.x, x0.y);
  out.y = pack2<T>(x0.z, x0.w);
  out.z = pack2<T>(x1.x, x1.y);
  out.w = pack2<T>(x1.z, x1.w);
  T* dq = static_cast<T*>(p.dq) + b * p.dq_stride.b + h * p.dq_stride.h + i * p.dq_stride.s;
  *reinterpret_cast<uint4*>(dq + c * 8) = out;
}

}  // namespace xpuruntime::cuda_kernels::flash
