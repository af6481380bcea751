// Cast between every dtype pair (fp32/fp16/bf16/fp64, int8..int64, uint8, bool)
// with the CPU kernel's rules, and Where, byte-generic over the element size.
#include <cmath>
#include <limits>

#include "backends/cuda/kernels/common/device_types.cuh"
#include "backends/cuda/kernels/elementwise/elementwise_impl.h"

namespace xpuruntime::cuda_ops {
namespace {

template <typename From, typename To>
__device__ __forceinline__ To cast_one(From x) {
  const auto v = load(x);
  using V = decltype(v);
  if constexpr (std::is_same_v<To, bool>) {
    return v != V(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<V>) {
    // Float to int saturates and maps NaN to 0: never undefined behaviour.
    const double d = static_cast<double>(v);
    if (d != d) return To(0);
    if (d >= static_cast<double>(std::numeric_limits<To>::max()))
      return std::numeric_limits<To>::max();
    if (d <= static_cast<double>(std::numeric_limits<To>::min()))
      return std::numeric_limits<To>::min();
    return static_cast<To>(d);
  } else if constexpr (std::is_same_v<To, __half> || std::is_same_v<To, __nv_bfloat16>) {
    // Through float (from fp64 a double rounding: off by one unit of the 16-bit
    // format at most, in rare halfway cases).
    return store<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

template <typename From, typename To>
__global__ void cast_kernel(const From* __restrict__ x, To* __restrict__ y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = cast_one<From, To>(x[i]);
}

template <typename E>
__global__ void where_kernel(const bool* __restrict__ c, const E* __restrict__ x,
                             const E* __restrict__ y, E* __restrict__ out, StridedIndex ix) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < ix.numel;
       i += stride) {
    out[i] =
        c[strided_offset(ix, 0, i)] ? x[strided_offset(ix, 1, i)] : y[strided_offset(ix, 2, i)];
  }
}

}  // namespace

void launch_cast(DType from, DType to, const void* x, void* y, int64_t n, void* stream) {
  if (n <= 0) return;
  cudaStream_t s = as_stream(stream);
  if (from == to) {
    XRT_CUDA_CHECK(cudaMemcpyAsync(y, x, static_cast<std::size_t>(n) * dtype_size(from),
                                   cudaMemcpyDeviceToDevice, s));
    return;
  }
  visit_dtype<TypeSet::kAll>(from, "Cast", [&](auto ft) {
    using F = typename decltype(ft)::type;
    visit_dtype<TypeSet::kAll>(to, "Cast", [&](auto tt) {
      using T = typename decltype(tt)::type;
      cast_kernel<F, T>
          <<<grid_for(n, 256), 256, 0, s>>>(static_cast<const F*>(x), static_cast<T*>(y), n);
      XRT_CUDA_LAUNCH_CHECK();
    });
  });
}

void launch_where(std::size_t elem_size, const StridedIndex& ix, const void* cond, const void* x,
                  const void* y, void* out, void* stream) {
  if (ix.numel <= 0) return;
  cudaStream_t s = as_stream(stream);
  const unsigned g = grid_for(ix.numel, 256);
  const bool* c = static_cast<const bool*>(cond);
  switch (elem_size) {
    // clang-format off
#define XRT_W(N, E)                                                                           \
  case N:                                                                                     \
    where_kernel<E><<<g, 256, 0, s>>>(c, static_cast<const E*>(x), static_cast<const E*>(y),  \
                                      static_cast<E*>(out), ix);                              \
    break;
    XRT_W(1, uint8_t)
    XRT_W(2, uint16_t)
    XRT_W(4, uint32_t)
    XRT_W(8, uint64_t)
#undef XRT_W
    // clang-format on
    default:
      XRT_THROW(UnsupportedOperationError, "Where (cuda): element size ", elem_size,
                " is not supported (1, 2, 4 or 8 bytes)");
  }
  XRT_CUDA_LAUNCH_CHECK();
}

}  // namespace xpuruntime::cuda_ops
