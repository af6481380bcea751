// Column sums (see column_sums_impl.h).
//
// Stage 1, vector path (cols and ld multiples of 8, x 16-byte aligned): lane tx of
// warp ty reads 16-byte chunks (8 columns) of rows ty, ty + 8, ... of its part,
// four loads in flight per iteration, into 8 fp32 accumulators; the 8 warps' sums
// meet in shared memory and each thread writes one column's partial. Other shapes
// take the scalar path (one thread per column). Stage 2 adds the parts in a fixed
// order (colsum_finish).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <exception>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernel_entry.h"
#include "backends/cuda/kernels/column_sums/column_sums_impl.h"
#include "xpuruntime/error.h"

namespace xpuruntime::cuda_kernels {
namespace {

template <typename T>
__device__ __forceinline__ float2 to_float2(uint32_t w);
template <>
__device__ __forceinline__ float2 to_float2<__half>(uint32_t w) {
  return __half22float2(*reinterpret_cast<const __half2*>(&w));
}
template <>
__device__ __forceinline__ float2 to_float2<__nv_bfloat16>(uint32_t w) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w));
}
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <typename T>
__device__ __forceinline__ void add_chunk(float (&acc)[8], const uint4& v) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = to_float2<T>(w[i]);
    acc[2 * i] += f.x;
    acc[2 * i + 1] += f.y;
  }
}

template <typename T>
__global__ void __launch_bounds__(256) colsum_parts_vec(const T* __restrict__ x, int64_t rows, int64_t cols,
                                                        int64_t ld, int64_t rows_per_part,
                                                        float* __restrict__ parts) {
  __shared__ float sums[8][kColSumBlockCols + 4];  // +4: fewer bank conflicts on the stores
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * 32 + tx) * 8;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_part;
  const int64_t r1 = min(rows, r0 + rows_per_part);
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (c0 < cols) {
    const T* p = x + c0;
    int64_t r = r0 + ty;
    for (; r + 24 < r1; r += 32) {
      uint4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = __ldg(reinterpret_cast<const uint4*>(p + (r + 8 * u) * ld));
#pragma unroll
      for (int u = 0; u < 4; ++u) add_chunk<T>(acc, v[u]);
    }
    for (; r < r1; r += 8) add_chunk<T>(acc, __ldg(reinterpret_cast<const uint4*>(p + r * ld)));
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) sums[ty][tx * 8 + e] = acc[e];
  __syncthreads();
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColSumBlockCols + threadIdx.x;
  if (col < cols) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) s += sums[i][threadIdx.x];
    parts[static_cast<int64_t>(blockIdx.y) * cols + col] = s;
  }
}

template <typename T>
__global__ void __launch_bounds__(256) colsum_parts_scalar(const T* __restrict__ x, int64_t rows, int64_t cols,
                                                           int64_t ld, int64_t rows_per_part,
                                                           float* __restrict__ parts) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColSumBlockCols + threadIdx.x;
  if (col >= cols) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_part;
  const int64_t r1 = min(rows, r0 + rows_per_part);
  float s = 0.f;
  for (int64_t r = r0; r < r1; ++r) s += static_cast<float>(x[r * ld + col]);
  parts[static_cast<int64_t>(blockIdx.y) * cols + col] = s;
}

// 32 columns per CTA, 8 part lanes: lane ty adds parts ty, ty + 8, ... (four loads
// in flight), then the 8 lane sums are added in lane order. (One thread walking
// all parts of a column serialised ~100 L2 round trips and took as long as stage 1.)
template <typename T>
__global__ void __launch_bounds__(256) colsum_finish(const float* __restrict__ parts, int64_t n_parts,
                                                     int64_t cols, T* __restrict__ out) {
  __shared__ float sums[8][33];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + tx;
  float acc = 0.f;
  if (col < cols) {
    int64_t p = ty;
    for (; p + 24 < n_parts; p += 32) {
      float v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = parts[(p + 8 * u) * cols + col];
#pragma unroll
      for (int u = 0; u < 4; ++u) acc += v[u];
    }
    for (; p < n_parts; p += 8) acc += parts[p * cols + col];
  }
  sums[ty][tx] = acc;
  __syncthreads();
  if (ty == 0 && col < cols) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) s += sums[i][tx];
    out[col] = from_float<T>(s);
  }
}

template <typename T>
void run(const ColumnSumsArgs& a) {
  const auto stream = static_cast<cudaStream_t>(a.stream);
  const int64_t n_parts = column_sums_parts(a.rows, a.cols);
  const int64_t rows_per_part = (a.rows + n_parts - 1) / n_parts;
  const dim3 grid(static_cast<unsigned>((a.cols + kColSumBlockCols - 1) / kColSumBlockCols),
                  static_cast<unsigned>(n_parts));
  const auto* x = static_cast<const T*>(a.x);
  const bool vec = a.cols % 8 == 0 && a.ld % 8 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  if (vec) {
    colsum_parts_vec<T><<<grid, 256, 0, stream>>>(x, a.rows, a.cols, a.ld, rows_per_part, a.workspace);
  } else {
    colsum_parts_scalar<T><<<grid, 256, 0, stream>>>(x, a.rows, a.cols, a.ld, rows_per_part, a.workspace);
  }
  XRT_CUDA_CHECK(cudaGetLastError());
  const auto finish_blocks = static_cast<unsigned>((a.cols + 31) / 32);
  colsum_finish<T><<<finish_blocks, 256, 0, stream>>>(a.workspace, n_parts, a.cols, static_cast<T*>(a.out));
  XRT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void column_sums(const ColumnSumsArgs& a) {
  XRT_CHECK(a.rows >= 0 && a.cols > 0 && a.ld >= a.cols && a.rows <= (int64_t{1} << 40), InvalidArgumentError,
            "column_sums: need rows >= 0, cols > 0 and a row stride >= cols (got ", a.rows, " x ", a.cols,
            ", row stride ", a.ld, ")");
  XRT_CHECK(a.out != nullptr && (a.rows == 0 || a.x != nullptr), InvalidArgumentError,
            "column_sums: null input or output pointer");
  XRT_CHECK(a.dtype == KernelDType::kFloat16 || a.dtype == KernelDType::kBFloat16, InvalidArgumentError,
            "column_sums: dtype must be float16 or bfloat16");
  const auto stream = static_cast<cudaStream_t>(a.stream);
  if (a.rows == 0) {  // a sum over no rows
    XRT_CUDA_CHECK(cudaMemsetAsync(a.out, 0, a.cols * 2, stream));
    return;
  }
  const int64_t need = column_sums_workspace_bytes(a.rows, a.cols);
  XRT_CHECK(a.workspace != nullptr && a.workspace_bytes >= need, InvalidArgumentError,
            "column_sums: the workspace of ", a.workspace_bytes, " bytes is too small (needs ", need, ")");
  if (a.dtype == KernelDType::kFloat16) {
    run<__half>(a);
  } else {
    run<__nv_bfloat16>(a);
  }
}

KernelStatus column_sums_entry(const ColumnSumsArgs* args, char* err, std::size_t err_len) noexcept {
  return guarded([&] { column_sums(*args); }, err, err_len);
}

KernelStatus column_sums_workspace_entry(int64_t rows, int64_t cols, int64_t* bytes, char* err,
                                         std::size_t err_len) noexcept {
  return guarded(
      [&] {
        XRT_CHECK(rows >= 0 && cols >= 0, InvalidArgumentError, "column_sums: rows (", rows,
                  ") and cols (", cols, ") must be non-negative");
        *bytes = column_sums_workspace_bytes(rows, cols);
      },
      err, err_len);
}

}  // namespace xpuruntime::cuda_kernels
