// FlashAttention-2 forward (Dao, 2023): one CTA computes kBlockM query rows of one
// (batch, head) and streams the key/value tiles through shared memory with an
// online softmax, so the Sq x Sk score matrix never reaches device memory.
//
// Warps split the query rows (each warp owns kMTiles x 16 contiguous rows, so a
// K/V fragment read from shared memory feeds kMTiles MMAs). K and V have one
// buffer each and are loaded asynchronously in alternation: V[j] streams in while
// S = Q K[j]^T is computed, K[j+1] while softmax and O += P V[j] run.
// Scores live in the log2 domain (scale * log2 e folded in) so exp is one ex2.
#pragma once

#include "backends/cuda/kernels/flash_v2/flash_common.cuh"

namespace xpuruntime::cuda_kernels::flash {

template <typename T_, int kD_, int kBlockM_, int kBlockN_, int kNWarps_, bool kExtras_>
struct FwdConfig {
  using T = T_;
  static constexpr int kD = kD_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kThreads = kNWarps * 32;
  // kExtras: the kernel variant that handles a user mask and dropout (run-time
  // switches inside); the plain variant keeps those paths out of the hot loop.
  static constexpr bool kExtras = kExtras_;
  static constexpr int kMTiles = kBlockM / (16 * kNWarps);  // 16-row MMA tiles per warp
  static constexpr int kNTiles = kBlockN / 8;               // 8-column score tiles
  static constexpr int kDTiles = kD / 8;                    // 8-column output tiles
  static constexpr int kSmemBytes = (kBlockM + 2 * kBlockN) * kD * static_cast<int>(sizeof(T));
  static_assert(kMTiles >= 1 && kBlockM % (16 * kNWarps) == 0, "rows must split into 16-row tiles");
  static_assert(kBlockN % 16 == 0 && (kD == 32 || kD % 64 == 0), "tile shape");
};

template <typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 2) flash_fwd_kernel(const __grid_constant__ FlashFwdArgs p) {
  using T = typename Cfg::T;
  constexpr int kD = Cfg::kD, kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN;
  constexpr int kThreads = Cfg::kThreads, kMTiles = Cfg::kMTiles;
  constexpr int kNTiles = Cfg::kNTiles, kDTiles = Cfg::kDTiles;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + kBlockM * kD;
  T* sV = sK + kBlockN * kD;

  const FlashShape sh = p.shape;
  // Longest (causal) row blocks first, so the tail of the grid is short work.
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (sh.heads_q / sh.heads_kv);
  const int m0 = m_block * kBlockM;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int warp_row0 = warp * kMTiles * 16;

  const T* q = static_cast<const T*>(p.q) + b * p.q_stride.b + h * p.q_stride.h;
  const T* k = static_cast<const T*>(p.k) + b * p.k_stride.b + hk * p.k_stride.h;
  const T* v = static_cast<const T*>(p.v) + b * p.v_stride.b + hk * p.v_stride.h;
  T* o = static_cast<T*>(p.o) + b * p.o_stride.b + h * p.o_stride.h;

  int n_blocks = cdiv(sh.seqlen_k, kBlockN);
  if (p.causal) n_blocks = min(n_blocks, cdiv(m0 + kBlockM, kBlockN));

  load_tile<T, kD, kBlockM, kThreads>(sQ, q, p.q_stride.s, m0, sh.seqlen_q, tid);
  if (n_blocks > 0) load_tile<T, kD, kBlockN, kThreads>(sK, k, p.k_stride.s, 0, sh.seqlen_k, tid);
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
      drop = make_dropout(p.dropout_p, p.rng_state, b * sh.heads_q + h);
      drop_scale = 1.0f / (1.0f - p.dropout_p);
    }
  }
  const float scale_log2 = p.scale * kLog2e;
  // Per-lane ldmatrix addresses (see swz_lane_addr): Q as A (rows = this warp's
  // query rows), K as B (non-transposed), V as B (transposed).
  const uint32_t q_frag_addr = swz_lane_addr<kD>(sQ, warp_row0 + (lane & 15), lane >> 4);
  const uint32_t k_frag_addr = swz_lane_addr<kD>(sK, (lane & 7) + (lane >> 4) * 8, (lane >> 3) & 1);
  const uint32_t v_frag_addr = swz_lane_addr<kD>(sV, (lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);

  float acc_o[kMTiles][kDTiles][4];
  float row_max[kMTiles][2], row_sum[kMTiles][2];
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mi][dt][e] = 0.0f;
    }
    row_max[mi][0] = row_max[mi][1] = -INFINITY;
    row_sum[mi][0] = row_sum[mi][1] = 0.0f;
  }

  for (int nb = 0; nb < n_blocks; ++nb) {
    const int n0 = nb * kBlockN;
    cp_async_wait<0>();  // K[nb] (and Q) landed
    __syncthreads();     // visible to every warp; every warp is also done with V[nb-1]
    load_tile<T, kD, kBlockN, kThreads>(sV, v, p.v_stride.s, n0, sh.seqlen_k, tid);
    cp_async_commit();

    // ---- S = Q K^T (fp32) -----------------------------------------------------
    float acc_s[kMTiles][kNTiles][4];
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_s[mi][nt][e] = 0.0f;
      }
    }
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      uint32_t a[kMTiles][4];
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) {
        ldmatrix_x4(a[mi], swz_at<kD>(q_frag_addr, mi * 16, 2 * kk));
      }
#pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        uint32_t bk[4];
        ldmatrix_x4(bk, swz_at<kD>(k_frag_addr, np * 16, 2 * kk));
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) {
          mma_16816<T>(acc_s[mi][2 * np], a[mi], bk[0], bk[1]);
          mma_16816<T>(acc_s[mi][2 * np + 1], a[mi], bk[2], bk[3]);
        }
      }
    }
    __syncthreads();  // every warp is done reading K[nb]
    if (nb + 1 < n_blocks) {
      load_tile<T, kD, kBlockN, kThreads>(sK, k, p.k_stride.s, n0 + kBlockN, sh.seqlen_k, tid);
    }
    cp_async_commit();  // possibly empty: keeps the wait_group counts uniform

    // ---- scale, mask, online softmax ---------------------------------------------
    const bool bounds_mask = (n0 + kBlockN > sh.seqlen_k) || (p.causal && n0 + kBlockN - 1 > m0);
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int row = m0 + warp_row0 + mi * 16 + g + hh * 8;
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = n0 + nt * 8 + 2 * t + e;
            float x = acc_s[mi][nt][2 * hh + e] * scale_log2;
            if (bounds_mask && (col >= sh.seqlen_k || (p.causal && col > row))) x = -INFINITY;
            if constexpr (Cfg::kExtras) {
              if (has_mask && row < sh.seqlen_q && col < sh.seqlen_k) x += mask.log2_term(row, col);
            }
            acc_s[mi][nt][2 * hh + e] = x;
            mx = fmaxf(mx, x);
          }
        }
        mx = quad_max(mx);
        const float m_new = fmaxf(row_max[mi][hh], mx);
        // A row with no visible key so far keeps max -inf; use 0 so that
        // exp2(-inf - 0) = 0 instead of NaN.
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        const float corr = fast_exp2(row_max[mi][hh] - m_use);
        row_max[mi][hh] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pe = fast_exp2(acc_s[mi][nt][2 * hh + e] - m_use);
            acc_s[mi][nt][2 * hh + e] = pe;
            sum += pe;
          }
        }
        row_sum[mi][hh] = row_sum[mi][hh] * corr + sum;  // per-lane partial; quad-reduced at the end
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          acc_o[mi][dt][2 * hh] *= corr;
          acc_o[mi][dt][2 * hh + 1] *= corr;
        }
        if constexpr (Cfg::kExtras) {
          if (has_dropout && row < sh.seqlen_q) {
#pragma unroll
            for (int nt = 0; nt < kNTiles; ++nt) {
              const uint4 r = drop.bits(row, (n0 >> 3) + nt);
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const bool keep = Dropout::pick(r, 2 * t + e) >= drop.threshold;
                acc_s[mi][nt][2 * hh + e] = keep ? acc_s[mi][nt][2 * hh + e] * drop_scale : 0.0f;
              }
            }
          }
        }
      }
    }

    cp_async_wait<1>();  // V[nb] landed (K[nb+1] may still be in flight)
    __syncthreads();

    // ---- O += P V ------------------------------------------------------------------
#pragma unroll
    for (int ks = 0; ks < kBlockN / 16; ++ks) {
      uint32_t a[kMTiles][4];
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) {
        a[mi][0] = pack2<T>(acc_s[mi][2 * ks][0], acc_s[mi][2 * ks][1]);
        a[mi][1] = pack2<T>(acc_s[mi][2 * ks][2], acc_s[mi][2 * ks][3]);
        a[mi][2] = pack2<T>(acc_s[mi][2 * ks + 1][0], acc_s[mi][2 * ks + 1][1]);
        a[mi][3] = pack2<T>(acc_s[mi][2 * ks + 1][2], acc_s[mi][2 * ks + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        uint32_t bv[4];
        ldmatrix_x4_trans(bv, swz_at<kD>(v_frag_addr, ks * 16, 2 * dp));
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) {
          mma_16816<T>(acc_o[mi][2 * dp], a[mi], bv[0], bv[1]);
          mma_16816<T>(acc_o[mi][2 * dp + 1], a[mi], bv[2], bv[3]);
        }
      }
    }
  }

  // ---- epilogue: normalise, write O through shared memory, write lse -----------------
  cp_async_wait<0>();  // with no key block the Q copy may still be in flight
  float* lse = p.lse + (static_cast<int64_t>(b) * sh.heads_q + h) * sh.seqlen_q;
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float l = quad_sum(row_sum[mi][hh]);
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      // nan_rows_zero: a NaN (or empty) row is written as zeros, not acc * inv.
      const bool zero_row = p.nan_rows_zero && !(l > 0.0f);
      const int r_local = warp_row0 + mi * 16 + g + hh * 8;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        *reinterpret_cast<uint32_t*>(sQ + swz<kD>(r_local, dt * 8 + 2 * t)) =
            zero_row ? pack2<T>(0.0f, 0.0f)
                     : pack2<T>(acc_o[mi][dt][2 * hh] * inv, acc_o[mi][dt][2 * hh + 1] * inv);
      }
      const int row = m0 + r_local;
      if (t == 0 && row < sh.seqlen_q) {
        // A row that saw no key gets +inf, so the backward pass computes P = 0 for it.
        lse[row] = (l > 0.0f && row_max[mi][hh] != -INFINITY)
                       ? (row_max[mi][hh] + __log2f(l)) * kLn2
                       : INFINITY;
      }
    }
  }
  __syncwarp();  // each warp reads back only the rows it wrote
  constexpr int kChunksPerRow = kD / 8;
  constexpr int kWarpChunks = kMTiles * 16 * kChunksPerRow;
#pragma unroll
  for (int i = 0; i < kWarpChunks / 32; ++i) {
    const int c = lane + i * 32;
    const int r_local = warp_row0 + c / kChunksPerRow;
    const int cc = c % kChunksPerRow;
    const int row = m0 + r_local;
    if (row < sh.seqlen_q) {
      *reinterpret_cast<uint4*>(o + static_cast<int64_t>(row) * p.o_stride.s + cc * 8) =
          *reinterpret_cast<const uint4*>(sQ + swz<kD>(r_local, cc * 8));
    }
  }
}

}  // namespace xpuruntime::cuda_kernels::flash
