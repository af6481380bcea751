// Reductions over the middle axis of [outer, reduce, inner] and CumSum. Rows
// (inner == 1): one warp per row below 2048 elements, one 256-thread block per
// longer row. Columns (inner > 1): 8 threads per output, 32 outputs per block,
// reading coalesced across inner. Every output is the same fixed-order combination
// run to run (no atomics).
#include <cmath>

#include "backends/cuda/kernels/common/device_types.cuh"
#include "backends/cuda/kernels/reduce/reduce_impl.h"

namespace xpuruntime::cuda_ops {
namespace {

template <ReduceOp K, typename T>
struct AccOf {
  using type = std::conditional_t<
      std::is_integral_v<T>,
      std::conditional_t<K == ReduceOp::kL2 || K == ReduceOp::kLogSumExp, double, int64_t>,
      compute_t<T>>;
};

// The running state: `a` for every op; LogSumExp keeps (a = max, b = sum of exp).
template <typename A>
struct State {
  A a;
  A b;
};

template <ReduceOp K, typename A>
__device__ __forceinline__ State<A> identity() {
  if constexpr (K == ReduceOp::kProd) return {A(1), A(0)};
  if constexpr (K == ReduceOp::kMax || K == ReduceOp::kLogSumExp) {
    if constexpr (std::is_floating_point_v<A>)
      return {-static_cast<A>(INFINITY), A(0)};
    else
      return {std::numeric_limits<A>::lowest(), A(0)};
  }
  if constexpr (K == ReduceOp::kMin) {
    if constexpr (std::is_floating_point_v<A>)
      return {static_cast<A>(INFINITY), A(0)};
    else
      return {std::numeric_limits<A>::max(), A(0)};
  }
  return {A(0), A(0)};
}

template <ReduceOp K, typename A>
__device__ __forceinline__ State<A> combine(State<A> x, State<A> y) {
  if constexpr (K == ReduceOp::kMax || K == ReduceOp::kMin) {
    if constexpr (std::is_floating_point_v<A>) {
      if (x.a != x.a || y.a != y.a) return {x.a + y.a, A(0)};  // NaN wins (numpy)
    }
    if constexpr (K == ReduceOp::kMax)
      return {y.a > x.a ? y.a : x.a, A(0)};
    else
      return {y.a < x.a ? y.a : x.a, A(0)};
  } else if constexpr (K == ReduceOp::kProd) {
    return {x.a * y.a, A(0)};
  } else if constexpr (K == ReduceOp::kLogSumExp) {
    if (x.a != x.a) return x;  // NaN poisons the pair whichever thread saw it
    if (y.a != y.a) return y;
    const A m = x.a > y.a ? x.a : y.a;
    const A ninf = -static_cast<A>(INFINITY);
    if (m == ninf) return {m, x.b + y.b};
    return {m,
            (x.a == ninf ? A(0) : x.b * exp(x.a - m)) + (y.a == ninf ? A(0) : y.b * exp(y.a - m))};
  } else {
    return {x.a + y.a, A(0)};
  }
}

template <ReduceOp K, typename A>
__device__ __forceinline__ State<A> lift(A v) {
  if constexpr (K == ReduceOp::kL1) return {v < A(0) ? -v : v, A(0)};
  if constexpr (K == ReduceOp::kL2 || K == ReduceOp::kSumSquare) return {v * v, A(0)};
  if constexpr (K == ReduceOp::kLogSumExp) {
    if (v == -static_cast<A>(INFINITY)) return {v, A(0)};
    if (v != v) return {v, v};
    return {v, A(1)};
  }
  return {v, A(0)};
}

template <ReduceOp K, typename A>
__device__ __forceinline__ A finish(State<A> s, int64_t n) {
  if constexpr (K == ReduceOp::kMean) {
    if constexpr (std::is_integral_v<A>) {
      if (n == 0) return A(0);  // an empty integer mean: no trap-free 0/0
    }
    return s.a / static_cast<A>(n);
  }
  if constexpr (K == ReduceOp::kL2) return sqrt(s.a);
  if constexpr (K == ReduceOp::kLogSumExp) return s.a + log(s.b);
  return s.a;
}

template <ReduceOp K, typename A>
__device__ __forceinline__ State<A> warp_combine(State<A> s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    State<A> other{__shfl_xor_sync(0xffffffffu, s.a, o), __shfl_xor_sync(0xffffffffu, s.b, o)};
    s = combine<K>(s, other);
  }
  return s;
}

template <ReduceOp K, typename T>
__global__ void reduce_warp_rows(const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                                 int64_t n) {
  using A = typename AccOf<K, T>::type;
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const T* xr = x + row * n;
  State<A> s = identity<K, A>();
  for (int64_t i = lane; i < n; i += 32) s = combine<K>(s, lift<K>(static_cast<A>(load(xr[i]))));
  s = warp_combine<K>(s);
  if (lane == 0) y[row] = store<T>(finish<K>(s, n));
}

template <ReduceOp K, typename T>
__global__ void reduce_block_rows(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  using A = typename AccOf<K, T>::type;
  __shared__ A sa[32], sb[32];
  const T* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  State<A> s = identity<K, A>();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    s = combine<K>(s, lift<K>(static_cast<A>(load(xr[i]))));
  s = warp_combine<K>(s);
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, warps = blockDim.x / 32;
  if (lane == 0) {
    sa[warp] = s.a;
    sb[warp] = s.b;
  }
  __syncthreads();
  if (warp == 0) {
    s = lane < warps ? State<A>{sa[lane], sb[lane]} : identity<K, A>();
    s = warp_combine<K>(s);
    if (lane == 0) y[blockIdx.x] = store<T>(finish<K>(s, n));
  }
}

// Columns (inner > 1): a block covers 32 adjacent (outer, inner) outputs (coalesced
// reads across inner) with 8 threads per output, each over every 8th element of
// the reduced axis; the 8 partial states combine in a fixed order.
constexpr int kColSlices = 8;

template <ReduceOp K, typename T>
__global__ void reduce_columns(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t n,
                               int64_t inner) {
  using A = typename AccOf<K, T>::type;
  __shared__ A sa[kColSlices][32], sb[kColSlices][32];
  const int64_t cols = outer * inner;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * 32; base < cols;
       base += static_cast<int64_t>(gridDim.x) * 32) {
    const int64_t c = base + tx;
    State<A> s = identity<K, A>();
    if (c < cols) {
      const int64_t o = c / inner, in = c - o * inner;
      const T* xc = x + o * n * inner + in;
      for (int64_t i = ty; i < n; i += kColSlices)
        s = combine<K>(s, lift<K>(static_cast<A>(load(xc[i * inner]))));
    }
    sa[ty][tx] = s.a;
    sb[ty][tx] = s.b;
    __syncthreads();
    if (ty == 0 && c < cols) {
      State<A> t{sa[0][tx], sb[0][tx]};
      for (int k = 1; k < kColSlices; ++k) t = combine<K>(t, State<A>{sa[k][tx], sb[k][tx]});
      y[c] = store<T>(finish<K>(t, n));
    }
    __syncthreads();
  }
}

template <ReduceOp K>
void reduce_typed(DType t, int64_t outer, int64_t n, int64_t inner, const void* x, void* y,
                  cudaStream_t s) {
  visit_dtype<TypeSet::kNumeric>(t, "Reduce", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    if (inner == 1 && n < 2048) {
      const int64_t blocks = (outer + 7) / 8;
      XRT_CHECK(blocks < (int64_t{1} << 31), InvalidArgumentError, "Reduce: too many rows (", outer,
                ")");
      reduce_warp_rows<K, T><<<static_cast<unsigned>(blocks), 256, 0, s>>>(px, py, outer, n);
    } else if (inner == 1) {
      XRT_CHECK(outer < (int64_t{1} << 31), InvalidArgumentError, "Reduce: too many rows (", outer,
                ")");
      reduce_block_rows<K, T><<<static_cast<unsigned>(outer), 256, 0, s>>>(px, py, n);
    } else {
      reduce_columns<K, T>
          <<<grid_for(outer * inner, 32), dim3(32, kColSlices), 0, s>>>(px, py, outer, n, inner);
    }
    XRT_CUDA_LAUNCH_CHECK();
  });
}

template <typename T>
__global__ void cumsum_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t n,
                              int64_t inner, bool exclusive, bool reverse) {
  using A = std::conditional_t<std::is_integral_v<T>, int64_t, compute_t<T>>;
  const int64_t cols = outer * inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
       c += stride) {
    const int64_t o = c / inner, in = c - o * inner;
    const T* xc = x + o * n * inner + in;
    T* yc = y + o * n * inner + in;
    A acc = A(0);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = reverse ? n - 1 - k : k;
      const A v = static_cast<A>(load(xc[i * inner]));
      if (exclusive) {
        yc[i * inner] = store<T>(acc);
        acc += v;
      } else {
        acc += v;
        yc[i * inner] = store<T>(acc);
      }
    }
  }
}

}  // namespace

void launch_reduce(ReduceOp op, DType t, int64_t outer, int64_t reduce, int64_t inner,
                   const void* x, void* y, void* stream) {
  if (outer * inner <= 0) return;
  cudaStream_t s = as_stream(stream);
  switch (op) {
    // clang-format off
#define XRT_R(K) \
  case ReduceOp::K: return reduce_typed<ReduceOp::K>(t, outer, reduce, inner, x, y, s);
    XRT_R(kSum)
    XRT_R(kMean)
    XRT_R(kMax)
    XRT_R(kMin)
    XRT_R(kProd)
    XRT_R(kL1)
    XRT_R(kL2)
    XRT_R(kLogSumExp)
    XRT_R(kSumSquare)
#undef XRT_R
    // clang-format on
  }
}

void launch_cumsum(DType t, int64_t outer, int64_t len, int64_t inner, bool exclusive, bool reverse,
                   const void* x, void* y, void* stream) {
  if (outer * len * inner <= 0) return;
  visit_dtype<TypeSet::kNumeric>(t, "CumSum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cumsum_kernel<T><<<grid_for(outer * inner, 256), 256, 0, as_stream(stream)>>>(
        static_cast<const T*>(x), static_cast<T*>(y), outer, len, inner, exclusive, reverse);
    XRT_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace xpuruntime::cuda_ops
