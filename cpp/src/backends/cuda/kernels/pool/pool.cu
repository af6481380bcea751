// MaxPool / AveragePool and inference BatchNormalization.
#include <cmath>

#include "backends/cuda/kernels/common/device_types.cuh"
#include "backends/cuda/kernels/pool/pool_impl.h"

namespace xpuruntime::cuda_ops {
namespace {

template <typename T, bool kMax>
__global__ void pool_kernel(const T* __restrict__ x, T* __restrict__ y, PoolGeometry g,
                            bool include_pad) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t out_sz = g.out[0] * g.out[1] * g.out[2];
  const int64_t in_sz = g.in[0] * g.in[1] * g.in[2];
  const int64_t n = g.planes * out_sz;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t p = i / out_sz;
    int64_t o = i - p * out_sz;
    const int64_t o2 = o % g.out[2];
    o /= g.out[2];
    const int64_t o1 = o % g.out[1], o0 = o / g.out[1];
    const int64_t b0 = o0 * g.s[0] - g.pb[0], b1 = o1 * g.s[1] - g.pb[1],
                  b2 = o2 * g.s[2] - g.pb[2];
    const T* xp = x + p * in_sz;
    C best = -static_cast<C>(INFINITY);
    bool any = false;
    C sum = 0;
    int64_t cnt = 0, cnt_pad = 0;
    for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
      const int64_t i0 = b0 + k0 * g.d[0];
      for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
        const int64_t i1 = b1 + k1 * g.d[1];
        for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
          const int64_t i2 = b2 + k2 * g.d[2];
          if (i0 < g.in[0] + g.pe[0] && i1 < g.in[1] + g.pe[1] && i2 < g.in[2] + g.pe[2]) ++cnt_pad;
          if (i0 < 0 || i1 < 0 || i2 < 0 || i0 >= g.in[0] || i1 >= g.in[1] || i2 >= g.in[2])
            continue;
          const C v = static_cast<C>(load(xp[(i0 * g.in[1] + i1) * g.in[2] + i2]));
          if constexpr (kMax) {
            if (v > best || !any) best = v;
            any = true;
          } else {
            sum += v;
            ++cnt;
          }
        }
      }
    }
    if constexpr (kMax) {
      y[i] = store<T>(best);
    } else {
      const int64_t div = include_pad ? cnt_pad : cnt;
      y[i] = store<T>(div > 0 ? sum / static_cast<C>(div) : C(0));
    }
  }
}

template <typename T>
__global__ void batchnorm_kernel(const T* __restrict__ x, const T* __restrict__ scale,
                                 const T* __restrict__ bias, const T* __restrict__ mean,
                                 const T* __restrict__ var, double eps, T* __restrict__ y,
                                 int64_t total, int64_t c, int64_t inner) {
  using C = compute_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t ch = (i / inner) % c;
    const C inv = C(1) / sqrt(load(var[ch]) + static_cast<C>(eps));
    y[i] = store<T>((load(x[i]) - load(mean[ch])) * load(scale[ch]) * inv + load(bias[ch]));
  }
}

}  // namespace

void launch_pool(DType t, bool is_max, bool count_include_pad, const PoolGeometry& g, const void* x,
                 void* y, void* stream) {
  const int64_t n = g.planes * g.out[0] * g.out[1] * g.out[2];
  if (n <= 0) return;
  cudaStream_t s = as_stream(stream);
  visit_dtype<TypeSet::kNumeric>(t, is_max ? "MaxPool" : "AveragePool", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_float_v<T> || std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>) {
      if (is_max) {
        pool_kernel<T, true><<<grid_for(n, 256), 256, 0, s>>>(static_cast<const T*>(x),
                                                              static_cast<T*>(y), g, false);
      } else {
        pool_kernel<T, false><<<grid_for(n, 256), 256, 0, s>>>(
            static_cast<const T*>(x), static_cast<T*>(y), g, count_include_pad);
      }
      XRT_CUDA_LAUNCH_CHECK();
    } else {
      XRT_THROW(UnsupportedOperationError, "pooling (cuda) does not take ", dtype_name(t));
    }
  });
}

void launch_batchnorm(DType t, int64_t n, int64_t c, int64_t inner, const void* x,
                      const void* scale, const void* bias, const void* mean, const void* var,
                      double eps, void* y, void* stream) {
  const int64_t total = n * c * inner;
  if (total <= 0) return;
  visit_dtype<TypeSet::kFloat>(t, "BatchNormalization", [&](auto tag) {
    using T = typename decltype(tag)::type;
    batchnorm_kernel<T><<<grid_for(total, 256), 256, 0, as_stream(stream)>>>(
        static_cast<const T*>(x), static_cast<const T*>(scale), static_cast<const T*>(bias),
        static_cast<const T*>(mean), static_cast<const T*>(var), eps, static_cast<T*>(y), total, c,
        inner);
    XRT_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace xpuruntime::cuda_ops
