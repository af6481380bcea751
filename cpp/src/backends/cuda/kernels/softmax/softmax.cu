// Softmax / LogSoftmax. Rows along the last axis (inner == 1): one warp per row up
// to 1024 elements, one 256-thread block per longer row; each thread keeps an
// online (max, sum of exp) pair, pairs merge across the warp/block, then a second
// read writes the outputs. Other axes (inner > 1): 8 threads per (outer, inner)
// column, 32 columns per block, coalesced across inner.
#include <cmath>

#include "backends/cuda/kernels/common/device_types.cuh"
#include "backends/cuda/kernels/softmax/softmax_impl.h"

namespace xpuruntime::cuda_ops {
namespace {

template <typename A>
struct MaxSum {
  A m;
  A s;
};

template <typename A>
__device__ __forceinline__ A neg_inf() {
  return -static_cast<A>(INFINITY);
}

// Adds one value: -inf contributes nothing; a NaN poisons the pair (max and sum
// NaN), so the row's outputs become NaN as numpy's, whichever thread saw it.
template <typename A>
__device__ __forceinline__ void ms_add(MaxSum<A>& st, A v) {
  if (v != v || st.m != st.m) {
    st.m = st.s = v != v ? v : st.m;
  } else if (v > st.m) {
    st.s = (st.m == neg_inf<A>() ? A(0) : st.s * exp(st.m - v)) + A(1);
    st.m = v;
  } else if (v != neg_inf<A>()) {
    st.s += exp(v - st.m);
  }
}

template <typename A>
__device__ __forceinline__ MaxSum<A> ms_merge(MaxSum<A> a, MaxSum<A> b) {
  if (a.m != a.m) return a;
  if (b.m != b.m) return b;
  const A m = a.m > b.m ? a.m : b.m;
  if (m == neg_inf<A>()) return {m, a.s + b.s};
  return {m, (a.m == neg_inf<A>() ? A(0) : a.s * exp(a.m - m)) +
                 (b.m == neg_inf<A>() ? A(0) : b.s * exp(b.m - m))};
}

template <typename A>
__device__ __forceinline__ MaxSum<A> warp_merge(MaxSum<A> st) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum<A> other{__shfl_xor_sync(0xffffffffu, st.m, o), __shfl_xor_sync(0xffffffffu, st.s, o)};
    st = ms_merge(st, other);
  }
  return st;
}

template <typename T, typename A>
__device__ __forceinline__ T finish(A v, const MaxSum<A>& st, bool log) {
  if (log) return store<T>(v - st.m - std::log(st.s));
  return store<T>(exp(v - st.m) / st.s);
}

// One warp per row (rows of at most 1024 elements).
template <typename T>
__global__ void softmax_warp_rows(const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                                  int64_t n, bool log) {
  using A = compute_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const T* xr = x + row * n;
  T* yr = y + row * n;
  MaxSum<A> st{neg_inf<A>(), A(0)};
  for (int64_t i = lane; i < n; i += 32) ms_add(st, static_cast<A>(load(xr[i])));
  st = warp_merge(st);
  for (int64_t i = lane; i < n; i += 32) yr[i] = finish<T>(static_cast<A>(load(xr[i])), st, log);
}

// Rows of at most kLanes * kPer elements, each row held in registers by kLanes lanes
// (element lane + kLanes * j): the maximum, then the sum of exponentials, each one
// shuffle reduction, so a row costs n exponentials (the online pairs above cost one
// per element and two per merge step on every lane: Swin's 49-element window rows
// ran at a third of the memory bandwidth). NaN and all -inf rows give NaN, as above.
template <typename T, int kLanes, int kPer>
__global__ void softmax_reg_rows(const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                                 int n, bool log) {
  using A = compute_t<T>;
  const int lane = threadIdx.x % kLanes;
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes;
  const bool active = row < rows;  // every lane stays for the full-warp shuffles
  const T* xr = x + row * n;
  T* yr = y + row * n;
  A v[kPer];
  A m = neg_inf<A>();
  bool nan = false;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = lane + kLanes * j;
    v[j] = active && i < n ? static_cast<A>(load(xr[i])) : neg_inf<A>();
    nan = nan || v[j] != v[j];
    m = v[j] > m ? v[j] : m;
  }
#pragma unroll
  for (int o = kLanes / 2; o > 0; o >>= 1) {
    const A other = __shfl_xor_sync(0xffffffffu, m, o, kLanes);
    m = other > m ? other : m;
    nan = __shfl_xor_sync(0xffffffffu, static_cast<int>(nan), o, kLanes) != 0 || nan;
  }
  if (nan) m = static_cast<A>(NAN);
  A sum = A(0);
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    v[j] = lane + kLanes * j < n ? v[j] - m : neg_inf<A>();
    sum += exp(v[j]);
  }
#pragma unroll
  for (int o = kLanes / 2; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o, kLanes);
  const A log_sum = log ? std::log(sum) : A(0);
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = lane + kLanes * j;
    if (active && i < n) yr[i] = store<T>(log ? v[j] - log_sum : exp(v[j]) / sum);
  }
}

template <typename T, int kLanes, int kPer>
void launch_reg_rows(const T* x, T* y, int64_t rows, int64_t n, bool log, cudaStream_t s) {
  constexpr int kThreads = 256;
  const int64_t blocks = (rows * kLanes + kThreads - 1) / kThreads;
  XRT_CHECK(blocks < (int64_t{1} << 31), InvalidArgumentError, "Softmax: ", rows,
            " rows is too many");
  softmax_reg_rows<T, kLanes, kPer>
      <<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(x, y, rows, static_cast<int>(n), log);
}

// Rows of up to 256 elements through softmax_reg_rows: lanes per row and elements per
// lane chosen so few lanes idle. False for longer rows.
template <typename T>
bool launch_short_rows(const T* x, T* y, int64_t rows, int64_t n, bool log, cudaStream_t s) {
  if (n <= 8) launch_reg_rows<T, 8, 1>(x, y, rows, n, log, s);
  else if (n <= 16) launch_reg_rows<T, 16, 1>(x, y, rows, n, log, s);
  else if (n <= 32) launch_reg_rows<T, 32, 1>(x, y, rows, n, log, s);
  else if (n <= 64) launch_reg_rows<T, 32, 2>(x, y, rows, n, log, s);
  else if (n <= 128) launch_reg_rows<T, 32, 4>(x, y, rows, n, log, s);
  else if (n <= 256) launch_reg_rows<T, 32, 8>(x, y, rows, n, log, s);
  else return false;
  return true;
}

// One block per row (long rows).
template <typename T>
__global__ void softmax_block_rows(const T* __restrict__ x, T* __restrict__ y, int64_t n,
                                   bool log) {
  using A = compute_t<T>;
  __shared__ A sm[32], ss[32];
  const T* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  T* yr = y + static_cast<int64_t>(blockIdx.x) * n;
  MaxSum<A> st{neg_inf<A>(), A(0)};
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ms_add(st, static_cast<A>(load(xr[i])));
  st = warp_merge(st);
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, warps = blockDim.x / 32;
  if (lane == 0) {
    sm[warp] = st.m;
    ss[warp] = st.s;
  }
  __syncthreads();
  st = lane < warps ? MaxSum<A>{sm[lane], ss[lane]} : MaxSum<A>{neg_inf<A>(), A(0)};
  st = warp_merge(st);  // every warp computes the same block total
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    yr[i] = finish<T>(static_cast<A>(load(xr[i])), st, log);
}

// Non-last axis: a block covers 32 adjacent (outer, inner) columns (coalesced
// reads across inner) with 8 threads per column, each over every 8th element of
// the axis; the 8 partial pairs merge in a fixed order.
constexpr int kColSlices = 8;

template <typename T>
__global__ void softmax_columns(const T* __restrict__ x, T* __restrict__ y, int64_t outer,
                                int64_t n, int64_t inner, bool log) {
  using A = compute_t<T>;
  __shared__ A sm[kColSlices][32], ss[kColSlices][32];
  const int64_t cols = outer * inner;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * 32; base < cols;
       base += static_cast<int64_t>(gridDim.x) * 32) {
    const int64_t c = base + tx;
    const bool active = c < cols;
    const int64_t o = active ? c / inner : 0, in = active ? c - o * inner : 0;
    const T* xc = x + o * n * inner + in;
    T* yc = y + o * n * inner + in;
    MaxSum<A> st{neg_inf<A>(), A(0)};
    if (active)
      for (int64_t i = ty; i < n; i += kColSlices) ms_add(st, static_cast<A>(load(xc[i * inner])));
    sm[ty][tx] = st.m;
    ss[ty][tx] = st.s;
    __syncthreads();
    MaxSum<A> tot{sm[0][tx], ss[0][tx]};
    for (int k = 1; k < kColSlices; ++k) tot = ms_merge(tot, MaxSum<A>{sm[k][tx], ss[k][tx]});
    if (active)
      for (int64_t i = ty; i < n; i += kColSlices)
        yc[i * inner] = finish<T>(static_cast<A>(load(xc[i * inner])), tot, log);
    __syncthreads();
  }
}

}  // namespace

void launch_softmax(DType t, bool log, int64_t outer, int64_t axis_len, int64_t inner,
                    const void* x, void* y, void* stream) {
  if (outer * axis_len * inner <= 0) return;
  cudaStream_t s = as_stream(stream);
  visit_dtype<TypeSet::kFloat>(t, "Softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    if (inner == 1 && launch_short_rows<T>(px, py, outer, axis_len, log, s)) {
      // registers per row (softmax_reg_rows)
    } else if (inner == 1 && axis_len <= 1024) {
      const int64_t blocks = (outer + 7) / 8;  // 8 warps (rows) per block
      XRT_CHECK(blocks < (int64_t{1} << 31), InvalidArgumentError, "Softmax: ", outer,
                " rows is too many");
      softmax_warp_rows<T>
          <<<static_cast<unsigned>(blocks), 256, 0, s>>>(px, py, outer, axis_len, log);
    } else if (inner == 1) {
      XRT_CHECK(outer < (int64_t{1} << 31), InvalidArgumentError, "Softmax: ", outer,
                " rows is too many");
      softmax_block_rows<T><<<static_cast<unsigned>(outer), 256, 0, s>>>(px, py, axis_len, log);
    } else {
      softmax_columns<T><<<grid_for(outer * inner, 32), dim3(32, kColSlices), 0, s>>>(
          px, py, outer, axis_len, inner, log);
    }
    XRT_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace xpuruntime::cuda_ops
