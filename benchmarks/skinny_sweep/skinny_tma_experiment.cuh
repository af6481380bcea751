// EXPERIMENT (tuning harness only, not part of the build): the skinny (M <= 16)
// split-K GEMM with B brought in by the tensor-memory accelerator. One producer
// thread issues 2-D tensor-map copies (cp.async.bulk.tensor, 128-byte swizzle) of
// 64-k x 128-column B tiles into a ring of shared-memory stages, completing on
// mbarriers; four consumer warps multiply them with ldmatrix + mma.sync m16n8k16
// against A (copied once per CTA) and release each stage through an "empty"
// mbarrier. K slices are summed across a thread-block cluster through distributed
// shared memory in a fixed order, as in the shipped kernel (skinny_gemm.cu, which
// the harness includes first: its conversions and epilogue are reused).
//
// Why: the shipped kernel's cp.async path issues 8 16-byte copies per thread per
// stage and keeps 2 stages in flight; the copy engine moves a whole 16 KB tile per
// instruction, so deep rings (4-8 stages) cost no issue slots.
#pragma once

#include <cuda.h>  // CUtensorMap and the encode function's type (no libcuda link)
#include <cuda_runtime.h>

#include <cooperative_groups.h>

#include <cstdint>

#include "backends/cuda/kernels/flash_v2/flash_ptx.cuh"
#include "backends/cuda/kernels/flash_v2/sm90/wgmma.cuh"

namespace xpuruntime::matmul::skinny_tma {

namespace cg = cooperative_groups;
namespace fl = cuda_kernels::flash;

constexpr int kBlockN = 128;                  // output columns per CTA
constexpr int kBlockK = 64;                   // k per stage (one 128-byte swizzle row)
constexpr int kConsumers = 4;                 // warps, 32 columns each
constexpr int kThreads = 32 * (kConsumers + 1);  // + one producer warp
constexpr int kStageBytes = kBlockN * kBlockK * 2;

struct Args {
  const uint16_t* a;
  int64_t a_rs;
  uint16_t* c;
  int64_t c_rs, c_cs;
  const uint16_t* bias;
  int m, n, k;
  int k_per_cta;    // multiple of kBlockK
  int a_row_elems;  // k_per_cta + 8
  int activation;
};

template <int kStages>
constexpr int smem_bytes(int a_row_elems) {
  return 1024 /* alignment slack */ + kStages * kStageBytes + 16 * a_row_elems * 2 + 2 * kStages * 8;
}

__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

template <typename T, bool kKMajor, int kStages>
__global__ void __launch_bounds__(kThreads, 1)
    skinny_tma_kernel(const __grid_constant__ CUtensorMap map, const __grid_constant__ Args p) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* base = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint16_t* stages = reinterpret_cast<uint16_t*>(base);
  uint16_t* sA = reinterpret_cast<uint16_t*>(base + kStages * kStageBytes);
  const uint32_t bars = fl::smem_addr(base + kStages * kStageBytes + 16 * p.a_row_elems * 2);
  auto full = [&](int s) { return bars + 8 * s; };
  auto empty = [&](int s) { return bars + 8 * (kStages + s); };

  cg::cluster_group cluster = cg::this_cluster();
  const int splits = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int n0 = static_cast<int>(blockIdx.x / splits) * kBlockN;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int k_begin = rank * p.k_per_cta;
  const int k_end = min(p.k, k_begin + p.k_per_cta);
  const int iters = k_end > k_begin ? (k_end - k_begin + kBlockK - 1) / kBlockK : 0;

  // The producer thread sets up the barriers and puts the first kStages tiles in
  // flight while the consumers copy A; after the barrier it refills stages as the
  // consumers release them.
  const bool producer = warp == kConsumers && lane == 0;
  auto issue = [&](int it) {
    const int s = it % kStages;
    mbar_expect_tx(full(s), kStageBytes);
    const uint32_t dst = fl::smem_addr(stages + s * (kStageBytes / 2));
    const int kk = k_begin + it * kBlockK;
    if constexpr (kKMajor) {
      tma_load_2d(dst, &map, kk, n0, full(s));  // box {64 k, 128 n}
    } else {
      tma_load_2d(dst, &map, n0, kk, full(s));  // two boxes {64 n, 64 k}
      tma_load_2d(dst + kStageBytes / 2, &map, n0 + 64, kk, full(s));
    }
  };
  if (producer) {
    for (int s = 0; s < kStages; ++s) {
      cuda_kernels::flash::sm90::mbar_init(full(s), 1);
      cuda_kernels::flash::sm90::mbar_init(empty(s), kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    for (int it = 0; it < min(kStages, iters); ++it) issue(it);
  } else if (warp < kConsumers) {
    // A's rows 0..15 over this CTA's K range (zeros past M and K).
    const int chunks = p.a_row_elems / 8;
    for (int id = threadIdx.x; id < 16 * chunks; id += 32 * kConsumers) {
      const int r = id / chunks, c8 = (id % chunks) * 8, kk = k_begin + c8;
      const bool ok = r < p.m && c8 < p.k_per_cta && kk < k_end;
      fl::cp_async_16(sA + r * p.a_row_elems + c8, ok ? p.a + r * p.a_rs + kk : p.a, ok);
    }
    fl::cp_async_commit();
    fl::cp_async_wait<0>();
  }
  __syncthreads();  // barriers initialised, A visible
  if (producer) {
    for (int it = kStages; it < iters; ++it) {
      cuda_kernels::flash::sm90::mbar_wait(empty(it % kStages), ((it / kStages) + 1) & 1);
      issue(it);
    }
  }

  float acc[4][4] = {};
  if (warp < kConsumers) {
    for (int it = 0; it < iters; ++it) {
      const int s = it % kStages;
      cuda_kernels::flash::sm90::mbar_wait(full(s), (it / kStages) & 1);
      const uint16_t* sB = stages + s * (kStageBytes / 2);
#pragma unroll
      for (int ks = 0; ks < kBlockK / 16; ++ks) {
        uint32_t af[4];
        fl::ldmatrix_x4(af, fl::smem_addr(sA + (lane & 15) * p.a_row_elems + it * kBlockK + ks * 16 + (lane >> 4) * 8));
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          const int n_base = warp * 32 + np * 16;
          uint32_t bf[4];
          if constexpr (kKMajor) {  // rows = columns n, 128 bytes of k each
            const int row = n_base + (lane & 7) + ((lane >> 4) << 3);
            const int chunk = ks * 2 + ((lane >> 3) & 1);
            fl::ldmatrix_x4(bf, fl::smem_addr(sB + row * 64 + ((chunk ^ (row & 7)) << 3)));
          } else {  // two boxes of 64 columns, rows = k
            const int row = ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
            const int chunk = (n_base >> 3) + (lane >> 4);
            const int box = chunk >> 3, c = chunk & 7;
            fl::ldmatrix_x4_trans(bf, fl::smem_addr(sB + box * (kBlockK * 64) + row * 64 + ((c ^ (row & 7)) << 3)));
          }
          fl::mma_16816<T>(acc[np * 2], af, bf[0], bf[1]);
          fl::mma_16816<T>(acc[np * 2 + 1], af, bf[2], bf[3]);
        }
      }
      __syncwarp();
      if (lane == 0) cuda_kernels::flash::sm90::mbar_arrive(empty(s));
    }
  }
  __syncthreads();  // every stage consumed: stage 0 becomes the partial

  float* partial = reinterpret_cast<float*>(base);  // [16][kBlockN]
  if (warp < kConsumers) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = warp * 32 + j * 8 + 2 * t;
      *reinterpret_cast<float2*>(partial + g * kBlockN + col) = make_float2(acc[j][0], acc[j][1]);
      *reinterpret_cast<float2*>(partial + (g + 8) * kBlockN + col) = make_float2(acc[j][2], acc[j][3]);
    }
  }
  if (splits > 1) {
    cluster.sync();
  } else {
    __syncthreads();
  }
  const int total = p.m * kBlockN;
  const int share = (total + splits - 1) / splits;
  const int e_end = min(total, (rank + 1) * share);
  for (int e = rank * share + static_cast<int>(threadIdx.x); e < e_end; e += kThreads) {
    float sum = 0.0f;
    for (int q = 0; q < splits; ++q) sum += (splits > 1 ? cluster.map_shared_rank(partial, q) : partial)[e];
    const int row = e / kBlockN, col = n0 + e % kBlockN;
    if (col < p.n) {
      if (p.bias != nullptr) sum += to_float<T>(p.bias[col]);
      p.c[row * p.c_rs + col * p.c_cs] = from_float<T>(activate(sum, p.activation));
    }
  }
  if (splits > 1) cluster.sync();
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiled encode_fn() {
  static EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      f = nullptr;
    }
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

// B (16-bit, K x N) as a tensor map: N-major (row stride ldb) boxes {64 n, 64 k};
// K-major (column stride ldb) boxes {64 k, 128 n}. Out-of-range elements read as 0.
inline bool make_map(CUtensorMap* map, const void* b, int64_t n, int64_t k, int64_t ldb, bool k_major) {
  const EncodeTiled enc = encode_fn();
  if (enc == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k_major ? k : n), static_cast<cuuint64_t>(k_major ? n : k)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ldb * 2)};
  const cuuint32_t box[2] = {64, k_major ? 128u : 64u};
  const cuuint32_t estr[2] = {1, 1};
  return enc(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<void*>(b), dims, strides, box, estr,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <typename T, bool kKMajor, int kStages>
cudaError_t launch(const CUtensorMap& map, Args args, int splits, cudaStream_t stream) {
  auto kernel = skinny_tma_kernel<T, kKMajor, kStages>;
  args.k_per_cta = static_cast<int>((((args.k + splits - 1) / splits) + kBlockK - 1) / kBlockK * kBlockK);
  args.a_row_elems = args.k_per_cta + 8;
  const int smem = smem_bytes<kStages>(args.a_row_elems);
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>((args.n + kBlockN - 1) / kBlockN * splits));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(splits);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = splits > 1 ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, map, args);
}

}  // namespace xpuruntime::matmul::skinny_tma
