// InstanceNormalization: one block per (batch, channel) row; the mean (of the
// values less the row's first, which keeps a large offset out of the fp32 sum),
// then the mean of squared deviations, each a block-wide sum in a fixed order
// (the same bits run to run), then one fused scale-and-shift pass.
//
// Few long rows (a GroupNorm with one group exports as InstanceNormalization over
// [N, 1, C*H*W]: PoolFormer's 32 rows of 200704 values kept 32 of 132 SMs busy,
// 25 us a call) split each row into chunks: one kernel writes every chunk's count,
// mean and sum of squared deviations (two passes over the chunk, the second from
// L2), the next merges a row's chunks in a fixed order (Chan et al.'s pairwise
// update: no cancellation, the same bits run to run) and normalizes its chunk.
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

// Chunk statistics of a split row: grid (chunks, rows); part[(row * chunks + c) * 2] =
// {mean, M2} of the chunk's values.
template <typename T, typename A>
__global__ void __launch_bounds__(kThreads)
    instance_norm_partial(const T* __restrict__ x, A* __restrict__ part, int64_t inner,
                          int64_t chunk) {
  __shared__ A sm[kThreads / 32];
  const int64_t row = blockIdx.y, c = blockIdx.x, chunks = gridDim.x;
  const T* xr = x + row * inner;
  const int64_t b = c * chunk, e = b + chunk < inner ? b + chunk : inner;
  const A pivot = static_cast<A>(load(xr[0]));
  A s = 0;
  for (int64_t i = b + threadIdx.x; i < e; i += kThreads) s += static_cast<A>(load(xr[i])) - pivot;
  const A mean = pivot + block_sum(s, sm) / static_cast<A>(e - b);
  A q = 0;
  for (int64_t i = b + threadIdx.x; i < e; i += kThreads) {
    const A d = static_cast<A>(load(xr[i])) - mean;
    q += d * d;
  }
  q = block_sum(q, sm);
  if (threadIdx.x == 0) {
    part[(row * chunks + c) * 2] = mean;
    part[(row * chunks + c) * 2 + 1] = q;
  }
}

// Merges the row's chunk statistics (every block of the row the same way, in chunk
// order) and normalizes this block's chunk.
template <typename T, typename A>
__global__ void __launch_bounds__(kThreads)
    instance_norm_apply(const T* __restrict__ x, const A* __restrict__ part,
                        const T* __restrict__ scale, const T* __restrict__ bias, T* __restrict__ y,
                        int64_t channels, int64_t inner, int64_t chunk, A eps) {
  __shared__ A stats[2];
  const int64_t row = blockIdx.y, c = blockIdx.x, chunks = gridDim.x;
  if (threadIdx.x == 0) {
    A n = 0, mean = 0, m2 = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t b = k * chunk;
      const A nk = static_cast<A>((b + chunk < inner ? b + chunk : inner) - b);
      const A mk = part[(row * chunks + k) * 2], qk = part[(row * chunks + k) * 2 + 1];
      const A tot = n + nk, delta = mk - mean;
      mean += delta * (nk / tot);
      m2 += qk + delta * delta * (n * nk / tot);
      n = tot;
    }
    stats[0] = mean;
    stats[1] = m2 / n;
  }
  __syncthreads();
  const A mean = stats[0];
  const int64_t ch_index = row % channels;
  const A ch = static_cast<A>(load(scale[ch_index])) / sqrt(stats[1] + eps);
  const A sh = static_cast<A>(load(bias[ch_index]));
  const T* xr = x + row * inner;
  T* yr = y + row * inner;
  const int64_t b = c * chunk, e = b + chunk < inner ? b + chunk : inner;
  for (int64_t i = b + threadIdx.x; i < e; i += kThreads)
    yr[i] = store<T>((static_cast<A>(load(xr[i])) - mean) * ch + sh);
}

// Chunks per row: at least 8192 values each (split_chunks).
int64_t chunks_for(int64_t rows, int64_t inner) { return split_chunks(rows, inner, 8192); }

}  // namespace

std::size_t instance_norm_workspace_bytes(DType t, int64_t rows, int64_t inner) {
  const int64_t c = rows > 0 && rows <= 65535 ? chunks_for(rows, inner) : 1;
  if (c <= 1) return 0;
  const std::size_t acc = t == DType::kFloat64 ? sizeof(double) : sizeof(float);
  return static_cast<std::size_t>(rows * c * 2) * acc;
}

void launch_instance_norm(DType t, const void* x, const void* scale, const void* bias, void* y,
                          int64_t batch, int64_t channels, int64_t inner, double eps,
                          void* workspace, std::size_t workspace_bytes, void* stream) {
  const int64_t rows = batch * channels;
  if (rows <= 0 || inner <= 0) return;
  XRT_CHECK(rows <= 0x7fffffff, UnsupportedOperationError, "InstanceNormalization (cuda): ", rows,
            " (batch x channel) rows exceed the grid limit 2^31 - 1");
  const std::size_t need = instance_norm_workspace_bytes(t, rows, inner);
  visit_dtype<TypeSet::kFloat>(t, "InstanceNormalization", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    if (need > 0 && workspace != nullptr && workspace_bytes >= need) {
      const int64_t chunks = chunks_for(rows, inner);
      const int64_t chunk = (inner + chunks - 1) / chunks;
      const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(rows));
      A* part = static_cast<A*>(workspace);
      instance_norm_partial<T, A>
          <<<grid, kThreads, 0, as_stream(stream)>>>(static_cast<const T*>(x), part, inner, chunk);
      XRT_CUDA_LAUNCH_CHECK();
      instance_norm_apply<T, A><<<grid, kThreads, 0, as_stream(stream)>>>(
          static_cast<const T*>(x), part, static_cast<const T*>(scale), static_cast<const T*>(bias),
          static_cast<T*>(y), channels, inner, chunk, static_cast<A>(eps));
      XRT_CUDA_LAUNCH_CHECK();
      return;
    }
    instance_norm_kernel<T, A><<<static_cast<unsigned>(rows), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(x), static_cast<const T*>(scale), static_cast<const T*>(bias),
        static_cast<T*>(y), channels, inner, static_cast<A>(eps));
    XRT_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace xpuruntime::cuda_ops
