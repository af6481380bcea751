// InstanceNormalization: one block per (batch, channel) row; the mean (of the
// values less the row's first, which keeps a large offset out of the fp32 sum),
// then the mean of squared deviations, each a block-wide sum in a fixed order
// (the same bits run to run), then one fused scale-and-shift pass.
#include "backends/cuda/kernels/common/device_types.cuh"
#include "backends/cuda/kernels/norm/norm_impl.h"

namespace xpuruntime::cuda_ops {
namespace {

constexpr int kThreads = 256;

// Sum of v over the block (every thread gets it). sm: kThreads / 32 slots.
template <typename A>
__device__ __forceinline__ A block_sum(A v, A* sm) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (lane == 0) sm[warp] = v;
  __syncthreads();
  A t = lane < kThreads / 32 ? sm[lane] : A(0);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  __syncthreads();  // sm is reused by the next call
  return t;
}

template <typename T, typename A>
__global__ void __launch_bounds__(kThreads)
    instance_norm_kernel(const T* __restrict__ x, const T* __restrict__ scale,
                         const T* __restrict__ bias, T* __restrict__ y, int64_t channels,
                         int64_t inner, A eps) {
  __shared__ A sm[kThreads / 32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * inner;
  T* yr = y + row * inner;
  // Summed relative to the row's first value: a row far from zero (a large common
  // offset) then sums small numbers, and the fp32 mean keeps its digits.
  const A pivot = static_cast<A>(load(xr[0]));
  A s = 0;
  for (int64_t i = threadIdx.x; i < inner; i += kThreads) s += static_cast<A>(load(xr[i])) - pivot;
  const A mean = pivot + block_sum(s, sm) / static_cast<A>(inner);
  A q = 0;
  for (int64_t i = threadIdx.x; i < inner; i += kThreads) {
    const A d = static_cast<A>(load(xr[i])) - mean;
    q += d * d;
  }
  const A var = block_sum(q, sm) / static_cast<A>(inner);
  const int64_t c = row % channels;
  const A ch = static_cast<A>(load(scale[c])) / sqrt(var + eps);
  const A sh = static_cast<A>(load(bias[c]));
  // (x - mean) * ch + bias, not x * ch + (bias - mean * ch): with a small variance ch is
  // large and mean * ch cancels catastrophically in fp32 (offset 50, variance 0: 1e-3).
  for (int64_t i = threadIdx.x; i < inner; i += kThreads)
    yr[i] = store<T>((static_cast<A>(load(xr[i])) - mean) * ch + sh);
}

}  // namespace

void launch_instance_norm(DType t, const void* x, const void* scale, const void* bias, void* y,
                          int64_t batch, int64_t channels, int64_t inner, double eps,
                          void* stream) {
  const int64_t rows = batch * channels;
  if (rows <= 0 || inner <= 0) return;
  XRT_CHECK(rows <= 0x7fffffff, UnsupportedOperationError, "InstanceNormalization (cuda): ", rows,
            " (batch x channel) rows exceed the grid limit 2^31 - 1");
  visit_dtype<TypeSet::kFloat>(t, "InstanceNormalization", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    instance_norm_kernel<T, A><<<static_cast<unsigned>(rows), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(x), static_cast<const T*>(scale), static_cast<const T*>(bias),
        static_cast<T*>(y), channels, inner, static_cast<A>(eps));
    XRT_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace xpuruntime::cuda_ops
