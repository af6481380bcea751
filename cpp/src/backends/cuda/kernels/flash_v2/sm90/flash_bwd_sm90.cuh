// Hopper (sm_90a) attention backward with warpgroup MMA, for the plain case (no
// user mask, no dropout). Same contract and results as flash_bwd_kernel's
// kExtras=false variant: dQ, dK, dV (dK/dV per query head), causal top-left
// aligned, GQA, any seqlen and b/h/s strides; D = rowsum(dO * O) is computed
// beforehand by flash_bwd_dot_do_o into p.dsum.
//
// One CTA = kBlockN = 128 keys of one (batch, query head) = 2 warpgroups of 64
// keys; it walks the query blocks (kBlockM = 64 rows for D = 128, 128 for D = 64)
// and keeps dK and dV in registers. Per query block a warpgroup computes the transposed products
//   S^T = K Q^T, dP^T = V dO^T                (wgmma_ss, both operands K-major)
// so that the accumulator rows are keys: P^T = exp(S^T * scale - lse) and
// dS^T = P^T * (dP^T - D) are then, packed to 16 bits, directly the register A
// operands of
//   dV += P^T dO, dK += dS^T Q                 (wgmma_rs_tb, B MN-major)
// as P is for O += P V in the forward. dS^T also goes to shared memory, where
//   dQ = dS K                                  (wgmma_ss_tt, both MN-major)
// reads it with the transpose bit: each warpgroup computes half of dQ's columns
// (kBlockM = 64) or rows (128) over all 128 keys, stores it (fp32) in a shared tile, and one thread hands the
// tile to the copy engine, which adds it into dq_accum in L2
// (cp.reduce.async.bulk): one bulk reduction per CTA and query block instead of
// 8192 per-element atomics. dq_accum then holds, in row i, column c at position
// c ^ 8 (i % 4) (the tile's bank-conflict swizzle, kept through the reduction, so
// a tile is one contiguous run); flash_bwd_convert_dq_sm90 undoes it.
//
// Loads: every thread issues 16-byte cp.async for its share of Q and dO (4-byte
// ones for lse and D) into 2 or 3 buffers (see kDkLate), completing on an
// mbarrier per buffer; block i + 1 is fetched during block i. Two CTA-wide named
// barriers per block order the shared tiles: after the dS^T stores (both halves
// are needed for dQ) and after the dQ stores (before the bulk reduction); every
// read of a block's dS^T and dQ tiles (and, without kDkLate, of its Q and dO)
// has retired by the second, which is what lets the next blocks overwrite them.
#pragma once

#include "backends/cuda/kernels/flash_v2/flash_common.cuh"
#include "backends/cuda/kernels/flash_v2/sm90/flash_fwd_sm90.cuh"
#include "backends/cuda/kernels/flash_v2/sm90/wgmma.cuh"

namespace xpuruntime::cuda_kernels::flash::sm90 {

template <typename T_, int kD_, int kBlockM_, bool kDkLate_>
struct BwdSm90Config {
  using T = T_;
  static constexpr int kD = kD_;
  static constexpr int kBlockM = kBlockM_;  // query rows per step
  static constexpr int kBlockN = 128;       // key rows per CTA: 2 warpgroups x 64
  // dQ = dS K [kBlockM x kD] is split between the warpgroups by rows when there
  // are 128 of them (each m64 x kD), else by columns (m64 x kD / 2).
  static constexpr bool kDqSplitRows = kBlockM == 128;
  static constexpr int kDqN = kDqSplitRows ? kD : kD / 2;  // dQ columns per warpgroup
  static constexpr int kThreads = 256;
  // kDkLate: dK += dS^T Q is issued after dQ = dS K and retired at the end of the
  // step, so it runs while dQ is stored and handed to the copy engine. A block's
  // Q buffer is then still read after the step's last barrier, so Q/dO need a
  // third buffer (the load of block i + 1 overwrites block i - 2's).
  static constexpr bool kDkLate = kDkLate_;
  static constexpr int kStages = kDkLate ? 3 : 2;
  static constexpr int kKVBytes = kBlockN * kD * 2;
  static constexpr int kQBytes = kBlockM * kD * 2;
  static constexpr int kDsBytes = kBlockN * kBlockM * 2;
  static constexpr int kDqBytes = kBlockM * kD * 4;
  static constexpr int kStatBytes = 2 * kBlockM * 4;  // lse and D of one query block
  // K, V, Q and dO [kStages], dS^T, dQ, stats[kStages], mbarriers, slack to align to 1024.
  static constexpr int kSmemBytes =
      2 * kKVBytes + 2 * kStages * kQBytes + kDsBytes + kDqBytes + kStages * (kStatBytes + 8) + 1024;
  static_assert(kD == 64 || kD == 128, "head dims with a wgmma instance");
  static_assert(kBlockM == 64 || kBlockM == 128, "query block sizes with a wgmma instance");
  static_assert(kDqN == 32 || kDqN == 64, "dQ widths with a wgmma_ss_tt instance");
};

__device__ __forceinline__ void cp_async_4_u32(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}

template <typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    flash_bwd_sm90_kernel(const __grid_constant__ FlashBwdArgs p) {
  using T = typename Cfg::T;
  constexpr int kD = Cfg::kD, kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kThreads = Cfg::kThreads;
  constexpr int kQBytes = Cfg::kQBytes, kStatBytes = Cfg::kStatBytes, kStages = Cfg::kStages;
  constexpr int kSN = kBlockM / 2;     // S^T / dP^T accumulators per thread (m64 x kBlockM)
  constexpr int kKN = kD / 2;          // dK / dV accumulators per thread (m64 x kD)
  constexpr int kDqN = Cfg::kDqN;      // dQ columns per warpgroup
  constexpr int kMSteps = kBlockM / 16;  // k16 steps of dV / dK (over the query rows)

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw_addr = smem_addr(smem_raw);
  const uint32_t sK = (raw_addr + 1023u) & ~1023u;  // swizzle atoms need 1024-byte alignment
  const uint32_t sV = sK + Cfg::kKVBytes;
  const uint32_t sQ = sV + Cfg::kKVBytes;        // kStages buffers
  const uint32_t sdO = sQ + kStages * kQBytes;   // kStages buffers
  const uint32_t sdS = sdO + kStages * kQBytes;  // dS^T [kBlockN keys x kBlockM queries]
  const uint32_t sdQ = sdS + Cfg::kDsBytes;
  const uint32_t sStat = sdQ + Cfg::kDqBytes;  // per buffer: lse[kBlockM], D[kBlockM]
  const uint32_t full = sStat + kStages * kStatBytes;
  unsigned char* base = smem_raw + (sK - raw_addr);
  unsigned char* ds_ptr = base + (sdS - sK);
  float* dq_ptr = reinterpret_cast<float*>(base + (sdQ - sK));
  const float* stat_ptr = reinterpret_cast<const float*>(base + (sStat - sK));

  const FlashShape sh = p.shape;
  const int n_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (sh.heads_q / sh.heads_kv);
  const int n0 = n_block * kBlockN;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  const int g = lane >> 2, t = lane & 3;
  const int row_w = (warp & 3) * 16 + g;  // accumulator row in the warpgroup's 64 (+8 for the second)
  const int64_t bh = static_cast<int64_t>(b) * sh.heads_q + h;

  const T* q = static_cast<const T*>(p.q) + b * p.q_stride.b + h * p.q_stride.h;
  const T* k = static_cast<const T*>(p.k) + b * p.k_stride.b + hk * p.k_stride.h;
  const T* v = static_cast<const T*>(p.v) + b * p.v_stride.b + hk * p.v_stride.h;
  const T* dout = static_cast<const T*>(p.dout) + b * p.do_stride.b + h * p.do_stride.h;
  const float* lse = p.lse + bh * sh.seqlen_q;
  const float* dsum = p.dsum + bh * sh.seqlen_q;
  float* dq_accum = p.dq_accum + bh * sh.seqlen_q * kD;

  // Causal: queries before n0 see none of this CTA's keys.
  const int m_begin = p.causal ? n0 / kBlockM : 0;
  const int n_iters = max(cdiv(sh.seqlen_q, kBlockM) - m_begin, 0);

  if (tid == 0) {
#pragma unroll
    for (int i = 0; i < kStages; ++i) mbar_init(full + 8 * i, kThreads);
  }
  __syncthreads();

  // Query block `it` (of this CTA's walk) into buffer it % kStages: Q and dO tiles
  // (zero rows past seqlen_q), lse and D (zeros there too; those rows are masked).
  auto load_block = [&](int it) {
    const int buf = it % kStages, m0 = (m_begin + it) * kBlockM;
    load_tile_sw128<kD, kBlockM, kThreads>(sQ + buf * kQBytes, q, p.q_stride.s, m0, sh.seqlen_q, tid);
    load_tile_sw128<kD, kBlockM, kThreads>(sdO + buf * kQBytes, dout, p.do_stride.s, m0, sh.seqlen_q, tid);
    if (tid < 2 * kBlockM) {
      const int r = tid % kBlockM;
      const bool valid = m0 + r < sh.seqlen_q;
      const float* src = (tid < kBlockM ? lse : dsum) + (valid ? m0 + r : 0);
      cp_async_4_u32(sStat + buf * kStatBytes + tid * 4, src, valid);
    }
    cp_async_mbar_arrive(full + 8 * buf);
  };
  if (n_iters > 0) {
    load_tile_sw128<kD, kBlockN, kThreads>(sK, k, p.k_stride.s, n0, sh.seqlen_k, tid);
    load_tile_sw128<kD, kBlockN, kThreads>(sV, v, p.v_stride.s, n0, sh.seqlen_k, tid);
    load_block(0);  // its arrival also covers the K and V copies
  }

  // K-major operands: 8-row groups 1024 B apart; a k16 step is +32 B in the line,
  // + one panel (rows x 128 B) per 64 columns.
  const uint64_t k_desc = make_desc(sK + wg * 64 * 128, 16, 1024);
  const uint64_t v_desc = make_desc(sV + wg * 64 * 128, 16, 1024);
  const uint64_t q_desc = make_desc(sQ, 16, 1024);
  const uint64_t do_desc = make_desc(sdO, 16, 1024);
  // MN-major operands: 64-wide panels LBO apart, 8-row k groups 1024 B apart, a
  // k16 step is 16 lines = 2048 B. dQ's B is the warpgroup's kDqN columns of K
  // (for D = 64 the second half starts 64 bytes into the swizzled lines).
  const uint64_t q_t_desc = make_desc(sQ, kBlockM * 128, 1024);
  const uint64_t do_t_desc = make_desc(sdO, kBlockM * 128, 1024);
  const int dq_row0 = Cfg::kDqSplitRows ? wg * 64 : 0;  // this warpgroup's dQ rows and columns
  const int dq_col0 = Cfg::kDqSplitRows ? 0 : wg * kDqN;
  const uint64_t ds_t_desc = make_desc(sdS + (dq_row0 / 64) * (kBlockN * 128), kBlockN * 128, 1024);
  const uint64_t k_t_desc =
      make_desc(sK + (dq_col0 / 64) * (kBlockN * 128) + (dq_col0 % 64) * 2, kBlockN * 128, 1024);

  float acc_dk[kKN], acc_dv[kKN];
#pragma unroll
  for (int i = 0; i < kKN; ++i) acc_dk[i] = acc_dv[i] = 0.0f;

  const float scale_log2 = p.scale * kLog2e;
  const int key_w = n0 + wg * 64 + row_w;  // this thread's first key (+8 for the second)
  for (int it = 0; it < n_iters; ++it) {
    const int buf = it % kStages, m0 = (m_begin + it) * kBlockM;
    mbar_wait(full + 8 * buf, (it / kStages) & 1);
    fence_proxy_async();

    // ---- S^T = K Q^T, dP^T = V dO^T --------------------------------------------------
    float s[kSN], dp[kSN];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const uint32_t koff = (kk >> 2) * (kBlockN * 128) + (kk & 3) * 32;
      const uint32_t qoff = buf * kQBytes + (kk >> 2) * (kBlockM * 128) + (kk & 3) * 32;
      wgmma_ss<T, kBlockM>(s, desc_add(k_desc, koff), desc_add(q_desc, qoff), kk > 0 ? 1 : 0);
    }
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const uint32_t koff = (kk >> 2) * (kBlockN * 128) + (kk & 3) * 32;
      const uint32_t qoff = buf * kQBytes + (kk >> 2) * (kBlockM * 128) + (kk & 3) * 32;
      wgmma_ss<T, kBlockM>(dp, desc_add(v_desc, koff), desc_add(do_desc, qoff), kk > 0 ? 1 : 0);
    }
    wgmma_commit();
    // The buffer's previous block was retired by everyone before the last step's
    // second barrier (kDkLate: before the first barrier of the last step).
    if (it + 1 < n_iters) load_block(it + 1);
    wgmma_wait<0>();
    fence_regs(s);
    fence_regs(dp);

    // ---- P^T, then dV += P^T dO behind the dS^T arithmetic ---------------------------
    // Columns of this thread: 8 j + 2 t + e (j < kBlockM / 8, e < 2).
    // lse and D are read from shared memory where used (kept in registers they
    // would cost kBlockM / 2 of them).
    const float2* st_lse = reinterpret_cast<const float2*>(stat_ptr + buf * (2 * kBlockM)) + t;
    const float2* st_d = st_lse + kBlockM / 2;
    const bool need_mask = n0 + kBlockN > sh.seqlen_k || m0 + kBlockM > sh.seqlen_q ||
                           (p.causal && m0 < n0 + kBlockN - 1);
#pragma unroll
    for (int i = 0; i < kSN; ++i) {
      const int j = i >> 2, e = i & 1;
      const float2 l = st_lse[4 * j];
      float x = fmaf(s[i], scale_log2, -(e ? l.y : l.x) * kLog2e);
      if (need_mask) {
        const int key = key_w + 8 * ((i >> 1) & 1), query = m0 + 8 * j + 2 * t + e;
        if (key >= sh.seqlen_k || query >= sh.seqlen_q || (p.causal && key > query)) x = -INFINITY;
      }
      s[i] = fast_exp2(x);
    }
    uint32_t p_frag[kMSteps][4];
    pack_p<T>(s, p_frag);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kMSteps; ++ks) {
      wgmma_rs_tb<T, kD>(acc_dv, p_frag[ks], desc_add(do_t_desc, buf * kQBytes + ks * 16 * 128));
    }
    wgmma_commit();

    // ---- dS^T to registers (for dK) and to shared memory (for dQ) ---------------------
#pragma unroll
    for (int i = 0; i < kSN; ++i) {
      const float2 d = st_d[4 * (i >> 2)];
      dp[i] = s[i] * (dp[i] - ((i & 1) ? d.y : d.x));
    }
    uint32_t ds_frag[kMSteps][4];
    pack_p<T>(dp, ds_frag);
#pragma unroll
    for (int ks = 0; ks < kMSteps; ++ks) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        // ds_frag[ks][r]: key row row_w + 8 (r % 2), query columns 16 ks + 8 (r / 2) + 2 t.
        const int row = wg * 64 + row_w + 8 * (r & 1);
        *reinterpret_cast<uint32_t*>(ds_ptr + tile_chunk_off<kBlockN>(row, 2 * ks + (r >> 1)) + 4 * t) =
            ds_frag[ks][r];
      }
    }
    auto gemm_dk = [&] {
#pragma unroll
      for (int ks = 0; ks < kMSteps; ++ks) {
        wgmma_rs_tb<T, kD>(acc_dk, ds_frag[ks], desc_add(q_t_desc, buf * kQBytes + ks * 16 * 128));
      }
      wgmma_commit();
    };
    if constexpr (!Cfg::kDkLate) {
      wgmma_fence();
      gemm_dk();
    }
    fence_proxy_async();
    // The dQ tile is rewritten below: the previous block's reduction must have read it.
    if (tid == 0) bulk_wait_read<0>();
    named_barrier_sync(1, kThreads);  // dS^T of both warpgroups in shared memory

    // ---- dQ (this warpgroup's rows or columns) = dS K -----------------------------------
    float acc_dq[kDqN / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      wgmma_ss_tt<T, kDqN>(acc_dq, desc_add(ds_t_desc, kk * 2048), desc_add(k_t_desc, kk * 2048),
                           kk > 0 ? 1 : 0);
    }
    wgmma_commit();
    if constexpr (Cfg::kDkLate) {
      gemm_dk();
      wgmma_wait<1>();  // dV and dQ done; dK may still run
    } else {
      wgmma_wait<0>();
      fence_regs(acc_dk);
      fence_regs(ds_frag);
    }
    fence_regs(acc_dq);
    fence_regs(acc_dv);
    fence_regs(p_frag);
    // Row r, column c goes to c ^ 8 (r % 4): the 4 rows a half-warp writes then
    // fall in 4 different bank groups.
#pragma unroll
    for (int i = 0; i < kDqN / 2; i += 2) {
      const int r = dq_row0 + row_w + 8 * ((i >> 1) & 1);
      const int c = dq_col0 + 8 * (i >> 2) + 2 * t;
      *reinterpret_cast<float2*>(dq_ptr + r * kD + (c ^ ((r & 3) << 3))) =
          make_float2(acc_dq[i] * p.scale, acc_dq[i + 1] * p.scale);
    }
    fence_proxy_async();
    named_barrier_sync(2, kThreads);  // the dQ tile is complete
    if (tid == 0) {
      const int rows = min(kBlockM, sh.seqlen_q - m0);
      bulk_reduce_add_f32(dq_accum + static_cast<int64_t>(m0) * kD, sdQ, rows * kD * 4);
      bulk_commit();
    }
    if constexpr (Cfg::kDkLate) {
      wgmma_wait<0>();
      fence_regs(acc_dk);
      fence_regs(ds_frag);
    }
  }
  // The reduction must be done with the tile before the CTA's shared memory goes.
  if (tid == 0) bulk_wait<0>();

  // ---- epilogue: dK (scaled) and dV of this query head's view of the key rows -------
  T* dk = static_cast<T*>(p.dk) + b * p.dk_stride.b + h * p.dk_stride.h;
  T* dv = static_cast<T*>(p.dv) + b * p.dv_stride.b + h * p.dv_stride.h;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int key = key_w + 8 * hh;
    if (key < sh.seqlen_k) {
#pragma unroll
      for (int c = 0; c < kD / 8; ++c) {
        const int col = 8 * c + 2 * t;
        *reinterpret_cast<uint32_t*>(dk + static_cast<int64_t>(key) * p.dk_stride.s + col) =
            pack2<T>(acc_dk[4 * c + 2 * hh] * p.scale, acc_dk[4 * c + 2 * hh + 1] * p.scale);
        *reinterpret_cast<uint32_t*>(dv + static_cast<int64_t>(key) * p.dv_stride.s + col) =
            pack2<T>(acc_dv[4 * c + 2 * hh], acc_dv[4 * c + 2 * hh + 1]);
      }
    }
  }
}

// dq = dq_accum converted to T, 8 elements per thread; row i's column c was
// accumulated at c ^ 8 (i % 4) (see above), so chunk cc comes from cc ^ (i % 4).
template <typename T, int kD>
__global__ void flash_bwd_convert_dq_sm90(const __grid_constant__ FlashBwdArgs p) {
  const FlashShape sh = p.shape;
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunks = static_cast<int64_t>(sh.batch) * sh.heads_q * sh.seqlen_q * (kD / 8);
  if (chunk >= chunks) return;
  const int c = static_cast<int>(chunk % (kD / 8));
  const int64_t row_id = chunk / (kD / 8);
  const int i = static_cast<int>(row_id % sh.seqlen_q);
  const int64_t bh = row_id / sh.seqlen_q;
  const int h = static_cast<int>(bh % sh.heads_q), b = static_cast<int>(bh / sh.heads_q);
  const float4* src = reinterpret_cast<const float4*>(p.dq_accum + row_id * kD + (c ^ (i & 3)) * 8);
  const float4 x0 = src[0], x1 = src[1];
  uint4 out;
  out.x = pack2<T>(x0.x, x0.y);
  out.y = pack2<T>(x0.z, x0.w);
  out.z = pack2<T>(x1.x, x1.y);
  out.w = pack2<T>(x1.z, x1.w);
  T* dq = static_cast<T*>(p.dq) + b * p.dq_stride.b + h * p.dq_stride.h + i * p.dq_stride.s;
  *reinterpret_cast<uint4*>(dq + c * 8) = out;
}

}  // namespace xpuruntime::cuda_kernels::flash::sm90
