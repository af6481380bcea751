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

// 1-D and 2-D windows (the common case): blocks of one output row's columns, planes
// along grid.y; 32-bit index math and no division per element (the general kernel's
// 64-bit divisions and per-tap bounds made PoolFormer's 3x3 AveragePool 78 us on a
// 32x64x56x56 fp16 tensor). The window's valid and padded counts are separable: rows
// times columns.
struct Pool2d {
  int64_t planes;
  int ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw, eh, ew;
};

__device__ __forceinline__ void window_1d(int start, int k, int d, int n, int n_pad, int& first,
                                          int& last, int& cnt_pad) {
  // Taps t with 0 <= start + t*d < n are [first, last); those inside the padded range
  // (start + t*d < n + pad_end; start >= -pad_begin always) count for include_pad.
  first = 0;
  while (first < k && start + first * d < 0) ++first;
  last = k;
  while (last > first && start + (last - 1) * d >= n) --last;
  cnt_pad = k;
  while (cnt_pad > 0 && start + (cnt_pad - 1) * d >= n + n_pad) --cnt_pad;
}

template <typename T, bool kMax>
__global__ void pool2d_kernel(const T* __restrict__ x, T* __restrict__ y, Pool2d g,
                              bool include_pad) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int tiles_w = (g.ow + blockDim.x - 1) / blockDim.x;
  const int oh = blockIdx.x / tiles_w;
  const int ow = (blockIdx.x - oh * tiles_w) * blockDim.x + threadIdx.x;
  if (ow >= g.ow) return;
  const int h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
  int fh, lh, ph, fw, lw, pw;
  window_1d(h0, g.kh, g.dh, g.ih, g.eh, fh, lh, ph);
  window_1d(w0, g.kw, g.dw, g.iw, g.ew, fw, lw, pw);
  const int64_t in_plane = static_cast<int64_t>(g.ih) * g.iw;
  const int64_t out_plane = static_cast<int64_t>(g.oh) * g.ow;
  const int div = include_pad ? ph * pw : (lh - fh) * (lw - fw);
  for (int64_t p = blockIdx.y; p < g.planes; p += gridDim.y) {
    const T* xp = x + p * in_plane;
    C best = -static_cast<C>(INFINITY);
    bool any = false;
    C sum = 0;
    for (int th = fh; th < lh; ++th) {
      const T* xr = xp + static_cast<int64_t>(h0 + th * g.dh) * g.iw;
      for (int tw = fw; tw < lw; ++tw) {
        const C v = static_cast<C>(load(xr[w0 + tw * g.dw]));
        if constexpr (kMax) {
          if (v > best || !any) best = v;
          any = true;
        } else {
          sum += v;
        }
      }
    }
    T* yp = y + p * out_plane + static_cast<int64_t>(oh) * g.ow + ow;
    if constexpr (kMax) {
      *yp = store<T>(best);
    } else {
      *yp = store<T>(div > 0 ? sum / static_cast<C>(div) : C(0));
    }
  }
}

// The 2-D kernel's geometry when g is a 1-D or 2-D pool whose sizes fit 32 bits.
bool as_pool2d(const PoolGeometry& g, Pool2d& p) {
  if (g.in[0] != 1 || g.out[0] != 1 || g.k[0] != 1 || g.pb[0] != 0 || g.pe[0] != 0) return false;
  const int64_t lim = int64_t{1} << 30;
  for (int i = 1; i < 3; ++i) {
    if (g.in[i] >= lim || g.out[i] >= lim || g.k[i] >= lim || g.s[i] >= lim || g.d[i] >= lim ||
        g.pb[i] >= lim || g.pe[i] >= lim || (g.out[i] - 1) * g.s[i] + (g.k[i] - 1) * g.d[i] >= lim)
      return false;
  }
  if ((g.out[2] + 31) / 32 * g.out[1] >= (int64_t{1} << 31) - 1) return false;
  p = Pool2d{g.planes,
             static_cast<int>(g.in[1]),
             static_cast<int>(g.in[2]),
             static_cast<int>(g.out[1]),
             static_cast<int>(g.out[2]),
             static_cast<int>(g.k[1]),
             static_cast<int>(g.k[2]),
             static_cast<int>(g.s[1]),
             static_cast<int>(g.s[2]),
             static_cast<int>(g.d[1]),
             static_cast<int>(g.d[2]),
             static_cast<int>(g.pb[1]),
             static_cast<int>(g.pb[2]),
             static_cast<int>(g.pe[1]),
             static_cast<int>(g.pe[2])};
  return true;
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
      Pool2d p2;
      if (as_pool2d(g, p2)) {
        const int threads = p2.ow <= 32 ? 32 : (p2.ow <= 64 ? 64 : 128);
        const int64_t tiles = (p2.ow + threads - 1) / threads * static_cast<int64_t>(p2.oh);
        const dim3 grid(static_cast<unsigned>(tiles),
                        static_cast<unsigned>(g.planes < 65535 ? g.planes : 65535));
        if (is_max) {
          pool2d_kernel<T, true>
              <<<grid, threads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), p2, false);
        } else {
          pool2d_kernel<T, false><<<grid, threads, 0, s>>>(
              static_cast<const T*>(x), static_cast<T*>(y), p2, count_include_pad);
        }
        XRT_CUDA_LAUNCH_CHECK();
        return;
      }
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
