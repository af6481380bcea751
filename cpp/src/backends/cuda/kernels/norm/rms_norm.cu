// RMSNormalization: one block per row. The mean of squares is a block-wide fp32
// sum in a fixed order (the same bits run to run); the row is read twice, the
// second time from L1/L2 (a decoder's hidden row is a few KB). Rows of a
// multiple of 8 16-bit elements (or 4 fp32) move in 16-byte vectors.
#include "backends/cuda/kernels/common/device_types.cuh"
#include "backends/cuda/kernels/norm/norm_impl.h"

namespace xpuruntime::cuda_ops {
namespace {

constexpr int kThreads = 128;

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

__device__ __forceinline__ float block_sum(float v, float *sm) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (lane == 0) sm[warp] = v;
  __syncthreads();
  float t = lane < kThreads / 32 ? sm[lane] : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    rms_norm_kernel(const T *__restrict__ x, const T *__restrict__ scale, T *__restrict__ y,
                    int64_t len, int64_t scale_len, float eps) {
  using VT = Vec<T, V>;
  __shared__ float sm[kThreads / 32];
  const int64_t row = blockIdx.x;
  const VT *xr = reinterpret_cast<const VT *>(x + row * len);
  VT *yr = reinterpret_cast<VT *>(y + row * len);
  const int64_t vectors = len / V;
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < vectors; i += kThreads) {
    const VT v = xr[i];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float f = load(v.v[j]);
      s = fmaf(f, f, s);
    }
  }
  const float inv = rsqrtf(block_sum(s, sm) / static_cast<float>(len) + eps);
  for (int64_t i = threadIdx.x; i < vectors; i += kThreads) {
    const VT v = xr[i];
    VT out;
    if (scale_len == len) {
      const VT w = reinterpret_cast<const VT *>(scale)[i];
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = store<T>(load(v.v[j]) * inv * load(w.v[j]));
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j)
        out.v[j] = store<T>(load(v.v[j]) * inv * load(scale[(i * V + j) % scale_len]));
    }
    yr[i] = out;
  }
}

bool aligned_to(const void *p, std::size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

}  // namespace

void launch_rms_norm(DType t, const void *x, const void *scale, void *y, int64_t rows, int64_t len,
                     int64_t scale_len, double eps, void *stream) {
  if (rows <= 0 || len <= 0) return;
  XRT_CHECK(rows <= 0x7fffffff, UnsupportedOperationError, "RMSNormalization (cuda): ", rows,
            " rows exceed the grid limit 2^31 - 1");
  visit_dtype<TypeSet::kFloat>(t, "RMSNormalization", [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto go = [&](auto vc) {
      constexpr int V = decltype(vc)::value;
      rms_norm_kernel<T, V><<<static_cast<unsigned>(rows), kThreads, 0, as_stream(stream)>>>(
          static_cast<const T *>(x), static_cast<const T *>(scale), static_cast<T *>(y), len,
          scale_len, static_cast<float>(eps));
      XRT_CUDA_LAUNCH_CHECK();
    };
    constexpr int kV = sizeof(T) <= 4 ? static_cast<int>(16 / sizeof(T)) : 1;
    if (len % kV == 0 && aligned_to(x, 16) && aligned_to(y, 16) &&
        (scale_len != len || aligned_to(scale, 16)))
      return go(std::integral_constant<int, kV>{});
    go(std::integral_constant<int, 1>{});
  });
}

}  // namespace xpuruntime::cuda_ops
