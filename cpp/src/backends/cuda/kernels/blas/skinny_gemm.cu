// The skinny (M <= 16) split-K GEMM; see skinny_gemm_impl.h for why and what.
//
// Work split: CTA (tile, rank) of a cluster owns output columns
// [tile*128, tile*128 + 128) and K rows [rank*k_per_split, ...). Its 4 warps each
// own 32 of the 128 columns and walk the CTA's K slice in 64-row stages:
//   per 16-row step: one ldmatrix.x4 of A (16x16), two ldmatrix.x4 of B (16x32)
//   and four m16n8k16 MMAs into fp32 accumulators.
// Shared-memory tiles are rows of 16-byte chunks with chunk c of row r stored at
// c ^ (r % 8), so the 8 rows one ldmatrix reads hit 8 different bank groups (the
// same swizzle as the attention kernels, flash_ptx.cuh).
// B is read in the layout it is stored in: N-major (row-major K x N, torch.matmul's
// b) through ldmatrix.trans, K-major (an nn.Linear weight, b = w.t()) through plain
// ldmatrix, so neither layout is copied.
// After the K loop every CTA leaves its 16x128 fp32 partial in shared memory; the
// cluster synchronizes, each rank sums its share of the elements over all ranks in
// rank order (DSMEM reads), applies bias and activation and stores C.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/flash_v2/flash_ptx.cuh"
#include "backends/cuda/kernels/blas/skinny_gemm_impl.h"
#include "xpuruntime/error.h"

namespace xpuruntime::matmul {
namespace {

namespace cg = cooperative_groups;
using cuda_kernels::flash::cp_async_16;
using cuda_kernels::flash::cp_async_commit;
using cuda_kernels::flash::cp_async_wait;
using cuda_kernels::flash::ldmatrix_x4;
using cuda_kernels::flash::ldmatrix_x4_trans;
using cuda_kernels::flash::mma_16816;
using cuda_kernels::flash::smem_addr;

// Tile configuration. The macros exist for the tuning sweep (a harness builds the
// kernel with other values); the defaults are what the sweep chose on an H200
// (see skinny_gemm_impl.h).
#ifndef XRT_SKINNY_BLOCK_N
#define XRT_SKINNY_BLOCK_N 128
#endif
#ifndef XRT_SKINNY_BLOCK_K
#define XRT_SKINNY_BLOCK_K 64
#endif
#ifndef XRT_SKINNY_STAGES
#define XRT_SKINNY_STAGES 3
#endif
#ifndef XRT_SKINNY_MAX_SPLITS
#define XRT_SKINNY_MAX_SPLITS 8
#endif
#ifndef XRT_SKINNY_CTAS_PER_SM
#define XRT_SKINNY_CTAS_PER_SM 2
#endif
constexpr int kBlockN = XRT_SKINNY_BLOCK_N;        // output columns per CTA
constexpr int kBlockK = XRT_SKINNY_BLOCK_K;        // K rows per pipeline stage
constexpr int kStages = XRT_SKINNY_STAGES;         // stages in flight
constexpr int kThreads = kBlockN;                  // one warp per 32 columns
constexpr int kMaxSplits = XRT_SKINNY_MAX_SPLITS;  // cluster size; above 8 is non-portable
constexpr int kRows = 16;                          // the MMA's M; rows >= M are zero
// Rows of at least 8 chunks, so the swizzle (chunk ^ row % 8) stays inside a row.
static_assert(kBlockN % 32 == 0 && kBlockN >= 64 && kBlockK % 64 == 0 && kStages >= 2, "tile shape");
constexpr int kAStage = kRows * kBlockK;            // elements
constexpr int kBStage = kBlockK * kBlockN;          // elements
static_assert(kBStage / 8 % kThreads == 0, "every thread loads the same number of B chunks");

// Shared-memory geometry of one stage: A (16 rows of K) then B (rows along B's
// strided dimension), every row a run of 16-byte chunks stored swizzled.
template <bool kBKMajor>
struct Smem {
  static constexpr int kARow = kBlockK;
  static constexpr int kBRow = kBKMajor ? kBlockK : kBlockN;  // along B's contiguous dimension
  static constexpr int kA = kRows * kARow;
  static constexpr int kStage = kA + kBStage;  // elements
  __device__ __forceinline__ static int at(int row, int chunk, int row_elems) {
    return row * row_elems + ((chunk ^ (row & 7)) << 3);
  }
};
constexpr int kSmemBytes = kStages * (kAStage + kBStage) * 2;  // 55,296 with the defaults
static_assert(kRows * kBlockN * 4 <= kSmemBytes, "the fp32 partial reuses the stage buffers");

struct SkinnyArgs {
  const uint16_t* a;
  int64_t a_rs, a_cs, a_bs;
  const uint16_t* b;
  int64_t b_rs, b_cs, b_bs;
  uint16_t* c;
  int64_t c_rs, c_cs, c_bs;
  const uint16_t* bias;  // null: none
  int m, n, k;
  int k_per_split;  // multiple of kBlockK
  int activation;   // Activation
};

template <typename T>
__device__ __forceinline__ float to_float(uint16_t v);
template <>
__device__ __forceinline__ float to_float<__half>(uint16_t v) {
  return __half2float(__ushort_as_half(v));
}
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(uint16_t v) {
  return __bfloat162float(__ushort_as_bfloat16(v));
}
template <typename T>
__device__ __forceinline__ uint16_t from_float(float v);
template <>
__device__ __forceinline__ uint16_t from_float<__half>(float v) {
  return __half_as_ushort(__float2half_rn(v));
}
template <>
__device__ __forceinline__ uint16_t from_float<__nv_bfloat16>(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// One 8-element chunk into shared memory: cp.async when everything is 16-byte
// aligned and the chunk is wholly in or out of range, else element loads (any
// strides, per-element bounds) and a 16-byte shared store.
template <bool kAligned>
__device__ __forceinline__ void load_chunk(uint16_t* dst, const uint16_t* base, int64_t row_off,
                                           int64_t step, int first, int limit, bool row_valid) {
  if constexpr (kAligned) {
    const bool valid = row_valid && first < limit;
    cp_async_16(dst, valid ? base + row_off + first : base, valid);
  } else {
    alignas(16) uint16_t v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      v[e] = (row_valid && first + e < limit) ? base[row_off + (first + e) * step] : uint16_t{0};
    }
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(v);
  }
}

// Stage loads. B chunks run along B's contiguous dimension: K for K-major, N for
// N-major. A chunks run along K.
template <bool kBKMajor, bool kAligned>
__device__ __forceinline__ void load_stage(const SkinnyArgs& p, const uint16_t* a, const uint16_t* b,
                                           uint16_t* sA, uint16_t* sB, int n0, int k0, int k_end) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < kBStage / 8 / kThreads; ++i) {
    const int id = tid + i * kThreads;
    if constexpr (kBKMajor) {  // smem rows are columns n, kBlockK / 8 chunks of K each
      const int row = id / (kBlockK / 8), chunk = id % (kBlockK / 8), n = n0 + row;
      load_chunk<kAligned>(sB + Smem<true>::at(row, chunk, kBlockK), b, int64_t{n} * p.b_cs, p.b_rs,
                           k0 + chunk * 8, k_end, n < p.n);
    } else {  // smem rows are K rows, kBlockN / 8 chunks of N each
      const int row = id / (kBlockN / 8), chunk = id % (kBlockN / 8), kk = k0 + row;
      load_chunk<kAligned>(sB + Smem<false>::at(row, chunk, kBlockN), b, int64_t{kk} * p.b_rs, p.b_cs,
                           n0 + chunk * 8, p.n, kk < k_end);
    }
  }
  for (int id = tid; id < kAStage / 8; id += kThreads) {
    const int row = id / (kBlockK / 8), chunk = id % (kBlockK / 8);
    load_chunk<kAligned>(sA + Smem<true>::at(row, chunk, kBlockK), a, int64_t{row} * p.a_rs, p.a_cs,
                         k0 + chunk * 8, k_end, row < p.m);
  }
}

template <typename T, bool kBKMajor>
__device__ __forceinline__ void compute_stage(const uint16_t* sA, const uint16_t* sB,
                                              float (&acc)[4][4], int warp, int lane) {
  using S = Smem<kBKMajor>;
#pragma unroll
  for (int ks = 0; ks < kBlockK / 16; ++ks) {
    uint32_t af[4];
    {
      const int row = lane & 15, chunk = ks * 2 + (lane >> 4);
      ldmatrix_x4(af, smem_addr(sA + S::at(row, chunk, S::kARow)));
    }
#pragma unroll
    for (int np = 0; np < 2; ++np) {  // two n8 tiles per ldmatrix.x4
      const int n_base = warp * 32 + np * 16;
      uint32_t bf[4];  // b0, b1 of tile n_base, then of tile n_base + 8
      if constexpr (kBKMajor) {
        const int row = n_base + (lane & 7) + ((lane >> 4) << 3);
        const int chunk = ks * 2 + ((lane >> 3) & 1);
        ldmatrix_x4(bf, smem_addr(sB + S::at(row, chunk, S::kBRow)));
      } else {
        const int row = ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
        const int chunk = (n_base >> 3) + (lane >> 4);
        ldmatrix_x4_trans(bf, smem_addr(sB + S::at(row, chunk, S::kBRow)));
      }
      mma_16816<T>(acc[np * 2], af, bf[0], bf[1]);
      mma_16816<T>(acc[np * 2 + 1], af, bf[2], bf[3]);
    }
  }
}

__device__ __forceinline__ float activate(float x, int activation) {
  if (activation == static_cast<int>(Activation::kRelu)) return fmaxf(x, 0.0f);
  if (activation == static_cast<int>(Activation::kGelu)) {
    // The tanh form cuBLASLt's GELU epilogue computes (gemm_problem.h).
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  }
  return x;
}

template <typename T, bool kBKMajor, bool kAligned>
__global__ void __launch_bounds__(kThreads) skinny_gemm_kernel(const __grid_constant__ SkinnyArgs p) {
  using S = Smem<kBKMajor>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  uint16_t* smem = reinterpret_cast<uint16_t*>(smem_raw);
  cg::cluster_group cluster = cg::this_cluster();
  const int splits = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int n0 = static_cast<int>(blockIdx.x / splits) * kBlockN;
  const int64_t batch = blockIdx.z;
  const uint16_t* a = p.a + batch * p.a_bs;
  const uint16_t* b = p.b + batch * p.b_bs;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  const int k_begin = rank * p.k_per_split;
  const int k_end = min(p.k, k_begin + p.k_per_split);
  const int iters = k_end > k_begin ? (k_end - k_begin + kBlockK - 1) / kBlockK : 0;
  auto stage_a = [&](int s) { return smem + s * S::kStage; };
  auto stage_b = [&](int s) { return smem + s * S::kStage + S::kA; };

  float acc[4][4] = {};
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < iters) {
      load_stage<kBKMajor, kAligned>(p, a, b, stage_a(s), stage_b(s), n0, k_begin + s * kBlockK, k_end);
    }
    cp_async_commit();
  }
  for (int it = 0; it < iters; ++it) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage `it` is visible; the slot refilled below was consumed last iteration
    const int next = it + kStages - 1;
    if (next < iters) {
      const int slot = next % kStages;
      load_stage<kBKMajor, kAligned>(p, a, b, stage_a(slot), stage_b(slot), n0, k_begin + next * kBlockK,
                                     k_end);
    }
    cp_async_commit();
    compute_stage<T, kBKMajor>(stage_a(it % kStages), stage_b(it % kStages), acc, warp, lane);
  }
  cp_async_wait<0>();
  __syncthreads();  // the stage buffers become the partial

  float* partial = reinterpret_cast<float*>(smem_raw);  // [kRows][kBlockN]
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int col = warp * 32 + j * 8 + 2 * t;
    *reinterpret_cast<float2*>(partial + g * kBlockN + col) = make_float2(acc[j][0], acc[j][1]);
    *reinterpret_cast<float2*>(partial + (g + 8) * kBlockN + col) = make_float2(acc[j][2], acc[j][3]);
  }
  cluster.sync();  // every rank's partial is complete and visible to the cluster

  const int total = p.m * kBlockN;
  const int share = (total + splits - 1) / splits;
  const int e_end = min(total, (rank + 1) * share);
  uint16_t* c = p.c + batch * p.c_bs;
  for (int e = rank * share + static_cast<int>(threadIdx.x); e < e_end; e += kThreads) {
    float sum = 0.0f;
    for (int q = 0; q < splits; ++q) sum += cluster.map_shared_rank(partial, q)[e];  // fixed order
    const int row = e / kBlockN, col = n0 + e % kBlockN;
    if (col < p.n) {
      if (p.bias != nullptr) sum += to_float<T>(p.bias[col]);
      c[row * p.c_rs + col * p.c_cs] = from_float<T>(activate(sum, p.activation));
    }
  }
  cluster.sync();  // no CTA leaves while another still reads its shared memory
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int device_sm_count(int device) {
  static std::array<std::atomic<int>, 64> cache{};
  if (device >= 0 && device < 64) {
    if (const int v = cache[device].load(std::memory_order_relaxed); v > 0) return v;
  }
  int sms = 0;
  XRT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (device >= 0 && device < 64) cache[device].store(sms, std::memory_order_relaxed);
  return sms;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// cp.async needs 16-byte aligned chunks that are wholly in or out of range: unit
// stride along the chunk dimension, other strides and that dimension's size
// multiples of 8 elements, 16-byte aligned bases. Strides of size-1 dimensions
// never move a pointer and do not count.
bool cp_async_ok(const GemmProblem& p, bool b_k_major) {
  auto mult8 = [](int64_t stride, int64_t extent) { return extent <= 1 || stride % 8 == 0; };
  const bool a_ok = aligned16(p.a.data) && p.k % 8 == 0 && (p.a.cs == 1 || p.k <= 1) &&
                    mult8(p.a.rs, p.m) && mult8(p.a.bs, p.batch);
  const bool b_ok = b_k_major ? (p.k % 8 == 0 && mult8(p.b.cs, p.n))
                              : (p.b.cs == 1 && p.n % 8 == 0 && mult8(p.b.rs, p.k));
  return a_ok && b_ok && aligned16(p.b.data) && mult8(p.b.bs, p.batch);
}

template <typename T, bool kBKMajor, bool kAligned>
void launch(const SkinnyArgs& args, int tiles, int splits, int64_t batch, cudaStream_t stream,
            int device) {
  auto kernel = skinny_gemm_kernel<T, kBKMajor, kAligned>;
  // The attribute is per device context; set it once per device.
  static std::atomic<uint64_t> smem_set{0};
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || !(smem_set.load(std::memory_order_acquire) & bit)) {
    XRT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    // Room for as many CTAs per SM as shared memory allows (the L1 share is unused).
    XRT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                        cudaSharedmemCarveoutMaxShared));
    if constexpr (kMaxSplits > 8) {
      XRT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    }
    smem_set.fetch_or(bit, std::memory_order_acq_rel);
  }
  constexpr int64_t kMaxGridZ = 65535;
  for (int64_t b0 = 0; b0 < batch; b0 += kMaxGridZ) {
    SkinnyArgs part = args;
    part.a += b0 * args.a_bs;
    part.b += b0 * args.b_bs;
    part.c += b0 * args.c_bs;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(tiles * splits), 1,
                       static_cast<unsigned>(std::min(kMaxGridZ, batch - b0)));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = kSmemBytes;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = static_cast<unsigned>(splits);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = splits > 1 ? 1 : 0;  // one slice: no cluster (this_cluster() is the CTA)
    XRT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, part));
  }
}

template <typename T>
void dispatch_layout(const SkinnyArgs& args, bool k_major, bool aligned, int tiles, int splits,
                     int64_t batch, cudaStream_t stream, int device) {
  if (k_major) {
    aligned ? launch<T, true, true>(args, tiles, splits, batch, stream, device)
            : launch<T, true, false>(args, tiles, splits, batch, stream, device);
  } else {
    aligned ? launch<T, false, true>(args, tiles, splits, batch, stream, device)
            : launch<T, false, false>(args, tiles, splits, batch, stream, device);
  }
}

}  // namespace

GemmRejection skinny_rejection(const GemmProblem& p) {
  using K = GemmRejection::Kind;
  if (p.c_in != nullptr) return {K::kEpilogue, "skinny has no residual (C input) epilogue"};
  if (p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16) {
    return {K::kDtype, "skinny runs float16 and bfloat16 (fp32 accumulate), not " +
                           std::string(dtype_name(p.dtype))};
  }
  if (p.m > kSkinnyMaxM) {
    return {K::kShape, "M = " + std::to_string(p.m) + " > " + std::to_string(kSkinnyMaxM) +
                           ": skinny is for decode-shaped GEMMs (M <= 16); cuBLAS/cuBLASLt take this"};
  }
  if (p.k > (int64_t{1} << 30) || p.n > (int64_t{1} << 30)) {
    return {K::kShape, "K and N must be below 2^30 (32-bit tile indices)"};
  }
  return row_sums_rejection(p, "skinny");
}

int skinny_splits(const GemmProblem& p, int sm_count) {
  const int64_t ctas = cdiv(p.n, kBlockN) * std::max<int64_t>(p.batch, 1);
  int splits = 1;
  // Split K until about XRT_SKINNY_CTAS_PER_SM CTAs per SM, keeping at least two
  // stages per slice.
  while (splits < kMaxSplits && ctas * splits < XRT_SKINNY_CTAS_PER_SM * int64_t{sm_count} &&
         cdiv(p.k, 2 * splits) >= 2 * kBlockK) {
    splits *= 2;
  }
  return splits;
}

void skinny_gemm(const GemmProblem& p, void* stream, int device) {
  const GemmRejection why = skinny_rejection(p);
  XRT_CHECK(!why, InvalidArgumentError, "skinny matmul: ", why.detail);
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
  cuda::DeviceGuard guard(device);
  const int splits = skinny_splits(p, device_sm_count(device));
  const bool k_major = p.b.rs == 1 && p.b.cs != 1;
  SkinnyArgs args;
  args.a = static_cast<const uint16_t*>(p.a.data);
  args.a_rs = p.a.rs, args.a_cs = p.a.cs, args.a_bs = p.a.bs;
  args.b = static_cast<const uint16_t*>(p.b.data);
  args.b_rs = p.b.rs, args.b_cs = p.b.cs, args.b_bs = p.b.bs;
  args.c = static_cast<uint16_t*>(p.c);
  args.c_rs = p.c_rs, args.c_cs = p.c_cs, args.c_bs = p.c_bs;
  args.bias = static_cast<const uint16_t*>(p.bias);
  args.m = static_cast<int>(p.m), args.n = static_cast<int>(p.n), args.k = static_cast<int>(p.k);
  args.k_per_split = static_cast<int>(cdiv(cdiv(p.k, splits), kBlockK) * kBlockK);
  args.activation = static_cast<int>(p.activation);
  const bool aligned = cp_async_ok(p, k_major);
  const int tiles = static_cast<int>(cdiv(p.n, kBlockN));
  const auto s = static_cast<cudaStream_t>(stream);
  if (p.dtype == DType::kFloat16) {
    dispatch_layout<__half>(args, k_major, aligned, tiles, splits, p.batch, s, device);
  } else {
    dispatch_layout<__nv_bfloat16>(args, k_major, aligned, tiles, splits, p.batch, s, device);
  }
}

}  // namespace xpuruntime::matmul
