// EXPERIMENT, not part of the build: a register-streaming variant of the skinny
// (M <= 16) GEMM, kept with its tuning harness (stream_sweep.cu) as the record of a
// design that lost. On an H100 it computes correctly (relerr ~3e-5 against cuBLAS)
// but, at its best configuration per shape, runs 1.14-1.7x slower than the shipped
// cp.async kernel (skinny_gemm.cu) wherever B is 6 MiB or more (4096x4096,
// 11008x4096, 4096x11008); on the two small shapes (768x768, 3072x768) it is ~10%
// faster than the cp.async kernel and still 1.4-1.7x slower than cuBLAS. ncu shows
// it latency-bound, warps waiting on their own loads (6.4 of 14.6 cycles per issued
// instruction in long-scoreboard stalls, DRAM at 41% of peak), where the cp.async
// kernel keeps more bytes in flight per instruction.
// Figures: benchmarks/results/skinny_stream_sweep_NVIDIA_H100.json.
//
// Why: with M <= 16 the GEMM is a stream over B, and its speed is how many bytes of
// B each SM keeps in flight and how little fixed cost surrounds the stream. Here
// every warp owns 32 output columns and a K range, keeps two groups of 16-byte
// loads in flight in registers (double buffering: the next group is issued before
// the current one is multiplied), and feeds mma.sync m16n8k16 directly:
//  - K-major B (an nn.Linear weight, b = w.t()): lane (g, t) loads 8 consecutive k
//    of column g. The MMA sums over k, so the k order inside a 32-k step is ours
//    to choose: the lane's 8 values become its b0/b1 registers of two k16 MMAs,
//    and A's fragments are read from shared memory in the same permuted order.
//  - N-major B (row-major K x N, torch.matmul's b): lane (g, t) loads 8
//    consecutive n of row k = g (and g + 8); movmatrix.trans turns each 8x8 block
//    into B fragments. The columns then come out permuted inside each 32-column
//    strip, and the C fragment of lane (g, t) is exactly columns 8t..8t+7: the
//    permutation undoes itself on the store.
// A (M x K, tiny) is copied once per CTA into shared memory (rows >= M and k past
// the range are zero). The warps of a CTA split its K range (kWK) and its columns
// (kWN); CTAs of a thread-block cluster split K again. Partials go to shared
// memory and each rank of the cluster sums its share of the outputs over all
// warps and ranks in a fixed order (DSMEM): deterministic, no workspace, no
// atomics, capturable in CUDA graphs.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "backends/cuda/kernels/flash_v2/flash_ptx.cuh"  // built with -I cpp/src

namespace xpuruntime::matmul::skinny_stream {

namespace cg = cooperative_groups;
using cuda_kernels::flash::ldmatrix_x4;
using cuda_kernels::flash::mma_16816;
using cuda_kernels::flash::smem_addr;

struct Args {
  const uint16_t* a;
  int64_t a_rs, a_cs, a_bs;
  const uint16_t* b;
  int64_t ldb;  // elements between B's 16-byte runs: row stride (N-major), column stride (K-major)
  int64_t b_bs;
  uint16_t* c;
  int64_t c_rs, c_cs, c_bs;
  const uint16_t* bias;  // null: none
  int m, n, k;
  int k_per_cta;   // multiple of kWK * step (a CTA's K range; the last may be shorter)
  int a_row_elems; // shared-memory row of A: k_per_cta + 8 (the pad keeps ldmatrix conflict-free)
  int activation;  // Activation
  int a_vector;    // A rows load as 16-byte chunks (unit column stride, aligned)
};

// The L2 fetch-size hint of the B loads (the tuning harness builds other values).
#ifndef XRT_SKINNY_STREAM_LD
#define XRT_SKINNY_STREAM_LD "ld.global.nc.L1::no_allocate"
#endif
#ifndef XRT_SKINNY_STREAM_L2_HINT
#define XRT_SKINNY_STREAM_L2_HINT ".L2::256B"
#endif

// 16 bytes of B through the non-coherent path, not kept in L1 (each byte is read
// once); zeros when !valid.
__device__ __forceinline__ uint4 load_b(const uint16_t* p, bool valid) {
  uint4 v;
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
      " mov.b32 %0, 0; mov.b32 %1, 0; mov.b32 %2, 0; mov.b32 %3, 0;\n"
      " @p " XRT_SKINNY_STREAM_LD XRT_SKINNY_STREAM_L2_HINT ".v4.u32 {%0,%1,%2,%3}, [%4];\n}\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"(static_cast<int>(valid)));
  return v;
}

// Transposes the 8x8 16-bit matrix whose row r / column pair j lane 4r + j holds.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t v) {
  uint32_t d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(v));
  return d;
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// to_float, from_float and activate are the shipped kernel's (skinny_gemm.cu, which
// the harness includes first): the same conversions and epilogue.

// Tile geometry shared by the kernel and its launcher.
template <bool kKMajor, int kWN, int kWK, int kU>
struct Config {
  static constexpr int kWarps = kWN * kWK;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockN = 32 * kWN;              // output columns per CTA
  static constexpr int kStepK = kKMajor ? 32 : 16;      // k per step
  static constexpr int kLoads = kKMajor ? 4 : 2;        // 16-byte loads per lane per step
  static constexpr int kGroup = kU;                     // steps per register buffer
  static constexpr int kKGranule = kWK * kStepK;        // k_per_cta is a multiple of this
  static constexpr int kPartialFloats = kWK * 16 * kBlockN;
  static int smem_bytes(int a_row_elems) { return 16 * a_row_elems * 2 + kPartialFloats * 4; }
};

template <typename T, bool kKMajor, int kWN, int kWK, int kU>
__global__ void __launch_bounds__(Config<kKMajor, kWN, kWK, kU>::kThreads)
    skinny_stream_kernel(const __grid_constant__ Args p) {
  using C = Config<kKMajor, kWN, kWK, kU>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  uint16_t* sA = reinterpret_cast<uint16_t*>(smem_raw);  // [16][a_row_elems]
  float* partial = reinterpret_cast<float*>(smem_raw + 16 * p.a_row_elems * 2);  // [kWK][16][kBlockN]

  cg::cluster_group cluster = cg::this_cluster();
  const int splits = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int n_cta = static_cast<int>(blockIdx.x / splits) * C::kBlockN;
  const int64_t batch = blockIdx.z;
  const uint16_t* a = p.a + batch * p.a_bs;
  const uint16_t* b = p.b + batch * p.b_bs;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int wn = warp % kWN, wk = warp / kWN;

  const int k_cta = rank * p.k_per_cta;
  const int k_cta_end = min(p.k, k_cta + p.k_per_cta);
  const int k_per_warp = p.k_per_cta / kWK;
  const int k_warp = k_cta + wk * k_per_warp;  // first k of this warp
  const int k_warp_end = min(k_cta_end, k_warp + k_per_warp);
  const int steps = k_warp_end > k_warp ? (k_warp_end - k_warp + C::kStepK - 1) / C::kStepK : 0;
  const int n_warp = n_cta + wn * 32;

  // Lane-invariant parts of the B addresses.
  //   K-major: load j of a step reads column n_warp + 8j + g at k = kb + 8t.
  //   N-major: load j reads row kb + 8j + g at columns n_warp + 8t.
  const uint16_t* b_lane;
  bool lane_ok[C::kLoads];
  if constexpr (kKMajor) {
    b_lane = b + static_cast<int64_t>(n_warp + g) * p.ldb + 8 * t;
#pragma unroll
    for (int j = 0; j < C::kLoads; ++j) lane_ok[j] = n_warp + 8 * j + g < p.n;
  } else {
    b_lane = b + static_cast<int64_t>(g) * p.ldb + n_warp + 8 * t;
#pragma unroll
    for (int j = 0; j < C::kLoads; ++j) lane_ok[j] = n_warp + 8 * t < p.n;
  }

  auto load_group = [&](uint4 (&dst)[kU][C::kLoads], int s0) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int kb = k_warp + (s0 + u) * C::kStepK;
      const bool step_ok = s0 + u < steps;
#pragma unroll
      for (int j = 0; j < C::kLoads; ++j) {
        if constexpr (kKMajor) {
          // K % 8 == 0 on this path, so a chunk is wholly inside or past the range.
          const bool ok = step_ok && lane_ok[j] && kb + 8 * t < k_warp_end;
          dst[u][j] = load_b(b_lane + static_cast<int64_t>(8 * j) * p.ldb + kb, ok);
        } else {
          const bool ok = step_ok && lane_ok[j] && kb + 8 * j + g < k_warp_end;
          dst[u][j] = load_b(b_lane + static_cast<int64_t>(kb + 8 * j) * p.ldb, ok);
        }
      }
    }
  };

  float acc[4][4] = {};
  const int a_row = p.a_row_elems;
  auto compute_group = [&](const uint4 (&src)[kU][C::kLoads], int s0) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (s0 + u >= steps) break;
      const int ka = (k_warp - k_cta) + (s0 + u) * C::kStepK;  // k offset inside sA
      if constexpr (kKMajor) {
        // Lane (g, t) holds k = kb + 8t .. kb + 8t + 7 of 4 columns; A's rows g and
        // g + 8 at the same k give the matching fragments of the two k16 MMAs.
        const uint4 lo = *reinterpret_cast<const uint4*>(sA + g * a_row + ka + 8 * t);
        const uint4 hi = *reinterpret_cast<const uint4*>(sA + (g + 8) * a_row + ka + 8 * t);
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          const uint32_t af[4] = {word(lo, 2 * s), word(hi, 2 * s), word(lo, 2 * s + 1), word(hi, 2 * s + 1)};
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            mma_16816<T>(acc[j], af, word(src[u][j], 2 * s), word(src[u][j], 2 * s + 1));
          }
        }
      } else {
        uint32_t af[4];
        ldmatrix_x4(af, smem_addr(sA + (lane & 15) * a_row + ka + (lane >> 4) * 8));
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          mma_16816<T>(acc[q], af, movmatrix_trans(word(src[u][0], q)), movmatrix_trans(word(src[u][1], q)));
        }
      }
    }
  };

  // The first group is in flight before A is copied: the two latencies overlap.
  uint4 buf0[kU][C::kLoads], buf1[kU][C::kLoads];
  load_group(buf0, 0);

  // A's rows 0..15 for this CTA's K range; zeros for rows >= M and k past the range.
  // Aligned rows go through cp.async: every chunk is requested before any arrives,
  // so the copy costs one memory latency, overlapping the first B group's.
  {
    const int chunks_per_row = a_row / 8;  // includes the pad chunk (written as zeros)
    for (int id = threadIdx.x; id < 16 * chunks_per_row; id += C::kThreads) {
      const int r = id / chunks_per_row, c8 = (id % chunks_per_row) * 8;
      const int kk = k_cta + c8;
      uint16_t* dst = sA + r * a_row + c8;
      const uint16_t* src = a + static_cast<int64_t>(r) * p.a_rs;
      const bool row_ok = r < p.m && c8 < p.k_per_cta;
      if (p.a_vector) {
        const bool ok = row_ok && kk < k_cta_end;  // K % 8 == 0 on this path: whole chunks
        cuda_kernels::flash::cp_async_16(dst, ok ? src + kk : a, ok);
      } else {
        alignas(16) uint16_t e[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          e[i] = row_ok && kk + i < k_cta_end ? src[static_cast<int64_t>(kk + i) * p.a_cs] : uint16_t{0};
        }
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(e);
      }
    }
    cuda_kernels::flash::cp_async_commit();
    cuda_kernels::flash::cp_async_wait<0>();
  }
  __syncthreads();

  for (int s0 = 0; s0 < steps; s0 += 2 * kU) {
    load_group(buf1, s0 + kU);
    compute_group(buf0, s0);
    if (s0 + kU >= steps) break;
    load_group(buf0, s0 + 2 * kU);
    compute_group(buf1, s0 + kU);
  }

  // Partials: [wk][row][column within the CTA].
  float* mine = partial + wk * 16 * C::kBlockN;
  const int col0 = wn * 32;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    // K-major: tile q is columns 8q + 2t, +1. N-major: 8t + 2q, +1 (the movmatrix permutation).
    const int col = col0 + (kKMajor ? 8 * q + 2 * t : 8 * t + 2 * q);
    *reinterpret_cast<float2*>(mine + g * C::kBlockN + col) = make_float2(acc[q][0], acc[q][1]);
    *reinterpret_cast<float2*>(mine + (g + 8) * C::kBlockN + col) = make_float2(acc[q][2], acc[q][3]);
  }
  if (splits > 1) {
    cluster.sync();  // every rank's partials are complete and visible to the cluster
  } else {
    __syncthreads();
  }

  // Rank r finishes a share of the M x kBlockN outputs, summing over ranks then
  // warps in a fixed order.
  const int total = p.m * C::kBlockN;
  const int share = (total + splits - 1) / splits;
  const int e_end = min(total, (rank + 1) * share);
  uint16_t* c = p.c + batch * p.c_bs;
  for (int e = rank * share + static_cast<int>(threadIdx.x); e < e_end; e += C::kThreads) {
    float sum = 0.0f;
    for (int q = 0; q < splits; ++q) {
      const float* part = splits > 1 ? cluster.map_shared_rank(partial, q) : partial;
#pragma unroll
      for (int w = 0; w < kWK; ++w) sum += part[w * 16 * C::kBlockN + e];
    }
    const int row = e / C::kBlockN, col = n_cta + e % C::kBlockN;
    if (col < p.n) {
      if (p.bias != nullptr) sum += to_float<T>(p.bias[col]);
      c[row * p.c_rs + col * p.c_cs] = from_float<T>(activate(sum, p.activation));
    }
  }
  if (splits > 1) cluster.sync();  // no CTA leaves while another still reads its shared memory
}

}  // namespace xpuruntime::matmul::skinny_stream

namespace xpuruntime::matmul::skinny_stream {

// Largest K range one CTA takes (its A slice lives in shared memory: 16 rows).
inline constexpr int kMaxKPerCta = 4096;

inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The cluster size (K split across CTAs) for a launch of `tiles` column tiles: the
// smallest power of two up to 8 that gives every SM `ctas_per_sm` CTAs, within the
// shared-memory K limit and keeping at least `min_k` of K per CTA. Returns 0 when
// even 8 ranks would exceed kMaxKPerCta (the caller takes another path).
inline int choose_splits(int64_t tiles, int64_t k, int sms, int ctas_per_sm, int min_k = 256) {
  int splits = 1;
  while (splits < 8 && (cdiv(k, splits) > kMaxKPerCta ||
                        (tiles * splits < int64_t{sms} * ctas_per_sm && cdiv(k, 2 * splits) >= min_k))) {
    splits *= 2;
  }
  return cdiv(k, splits) > kMaxKPerCta ? 0 : splits;
}

// K per CTA for `splits` ranks: a multiple of the warps' K granule and of 64 (the
// ldmatrix rows of A stay 16 bytes off the 128-byte bank period).
template <typename Cfg>
int k_per_cta(int64_t k, int splits) {
  constexpr int kUnit = Cfg::kKGranule > 64 ? Cfg::kKGranule : 64;  // both powers of two
  static_assert((Cfg::kKGranule & (Cfg::kKGranule - 1)) == 0, "granule is a power of two");
  return static_cast<int>(cdiv(cdiv(k, splits), kUnit) * kUnit);
}

// Enqueues the kernel; args.k_per_cta and args.a_row_elems are filled in here.
template <typename T, bool kKMajor, int kWN, int kWK, int kU>
cudaError_t launch(Args args, int splits, int64_t batch, cudaStream_t stream, int device) {
  using Cfg = Config<kKMajor, kWN, kWK, kU>;
  auto kernel = skinny_stream_kernel<T, kKMajor, kWN, kWK, kU>;
  args.k_per_cta = k_per_cta<Cfg>(args.k, splits);
  args.a_row_elems = args.k_per_cta + 8;
  const int smem = Cfg::smem_bytes(args.a_row_elems);
  // Raised once per device to the most any launch asks (the attribute is a limit,
  // not a reservation; occupancy follows each launch's own size).
  static std::atomic<uint64_t> attr_set{0};
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || !(attr_set.load(std::memory_order_acquire) & bit)) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         Cfg::smem_bytes(kMaxKPerCta + 8));
    if (e == cudaSuccess) {
      e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                               cudaSharedmemCarveoutMaxShared);
    }
    if (e != cudaSuccess) return e;
    attr_set.fetch_or(bit, std::memory_order_acq_rel);
  }
  const int64_t tiles = cdiv(args.n, Cfg::kBlockN);
  constexpr int64_t kMaxGridZ = 65535;
  for (int64_t b0 = 0; b0 < batch; b0 += kMaxGridZ) {
    Args part = args;
    part.a += b0 * args.a_bs;
    part.b += b0 * args.b_bs;
    part.c += b0 * args.c_bs;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(tiles * splits), 1,
                       static_cast<unsigned>(batch - b0 < kMaxGridZ ? batch - b0 : kMaxGridZ));
    cfg.blockDim = dim3(Cfg::kThreads);
    cfg.dynamicSmemBytes = static_cast<size_t>(smem);
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = static_cast<unsigned>(splits);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = splits > 1 ? 1 : 0;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, part);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace xpuruntime::matmul::skinny_stream
