// Channels-last depthwise convolution. cuDNN's depthwise kernels were the
// largest cost of every depthwise-separable network in bench_native_cuda.py on
// the H200 (conv2d_grouped_direct_kernel: 84% of ConvNeXt-T, 60% of
// EfficientNet-B0, 67% of MobileNetV3 in fp16), an order of magnitude off the
// memory bound, and its channels-last depthwise path was slower still. A
// depthwise layer is memory-bound: each output reads kh*kw inputs of its own
// channel. So one thread computes TW neighbouring outputs of one row for V
// contiguous channels (16-byte loads of x, w and y, threads of a warp on
// neighbouring channel vectors: coalesced), the overlapping input columns of
// its TW outputs come from L1, and the epilogue (bias, residual, activation,
// SiLU) is applied before the single store.
#include "backends/cuda/kernels/common/device_types.cuh"
#include "backends/cuda/kernels/depthwise/depthwise_impl.h"

namespace xpuruntime::cuda_ops {
namespace {

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

__device__ __forceinline__ float activate(float v, const DwEpilogue &e) {
  switch (e.act) {
    case DwActivation::kNone:
      break;
    case DwActivation::kRelu:
      v = fmaxf(v, 0.f);
      break;
    case DwActivation::kClip:
      v = fminf(fmaxf(v, e.lo), e.hi);
      break;
    case DwActivation::kSigmoid:
      v = 1.f / (1.f + __expf(-v));
      break;
    case DwActivation::kHardSigmoid:
      v = fminf(fmaxf(e.alpha * v + e.beta, 0.f), 1.f);
      break;
    case DwActivation::kHardSwish:
      v = v * fminf(fmaxf(v / 6.f + 0.5f, 0.f), 1.f);
      break;
    case DwActivation::kLeakyRelu:
      v = v >= 0.f ? v : e.alpha * v;
      break;
    case DwActivation::kTanh:
      v = tanhf(v);
      break;
  }
  if (e.swish) v = v / (1.f + __expf(-v));
  return v;
}

// One thread: outputs (n, oh, ow0 .. ow0+TW-1) x channels [cv*V, cv*V+V). KH/KW > 0
// fix the window at compile time (the common 3x3, 5x5 and 7x7: every tap unrolled, its
// loads issued together); kUnitW says the width stride and dilation are 1, so the
// TW + KW - 1 input columns a row needs are loaded once into registers instead of
// KW * TW times through L1 (PVT's and EfficientNet's 3x3 layers ran at a third of the
// memory bound with the runtime loops).
template <typename T, int V, int TW, int KH, int KW, bool kUnitW>
__global__ void __launch_bounds__(256)
    depthwise_nhwc_kernel(const T *__restrict__ x, const T *__restrict__ w,
                          const T *__restrict__ bias, const T *__restrict__ residual,
                          T *__restrict__ y, DwGeometry g, DwEpilogue e, uint32_t total) {
  using VT = Vec<T, V>;
  static_assert(!kUnitW || KW > 0, "the register window needs a fixed width");
  const int kh_n = KH > 0 ? KH : g.kh, kw_n = KW > 0 ? KW : g.kw;
  constexpr int kUnrollH = KH > 0 ? KH : 1, kUnrollW = KW > 0 ? KW : 1;  // runtime: rolled
  const uint32_t vectors = static_cast<uint32_t>(g.c / V);
  const uint32_t strips = static_cast<uint32_t>((g.ow + TW - 1) / TW);
  const uint32_t step = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    const uint32_t cv = i % vectors;
    uint32_t r = i / vectors;
    const int ow0 = static_cast<int>(r % strips) * TW;
    r /= strips;
    const int oh = static_cast<int>(r % static_cast<uint32_t>(g.oh));
    const int n = static_cast<int>(r / static_cast<uint32_t>(g.oh));
    const int c0 = static_cast<int>(cv) * V;

    float acc[TW][V];
#pragma unroll
    for (int t = 0; t < TW; ++t)
#pragma unroll
      for (int j = 0; j < V; ++j) acc[t][j] = 0.f;

#pragma unroll kUnrollH
    for (int kh = 0; kh < kh_n; ++kh) {
      const int ih = oh * g.sh - g.ph + kh * g.dh;
      if (ih < 0 || ih >= g.h) continue;
      const T *xrow = x + (static_cast<int64_t>(n) * g.h + ih) * g.w * g.c + c0;
      if constexpr (kUnitW) {
        // Columns ow0 - pw .. ow0 - pw + TW + KW - 2, zero outside the row (outputs
        // past the row's end are computed from zeros and never stored).
        VT win[TW + KW - 1];
#pragma unroll
        for (int u = 0; u < TW + KW - 1; ++u) {
          const int iw = ow0 - g.pw + u;
          if (iw >= 0 && iw < g.w) {
            win[u] = *reinterpret_cast<const VT *>(xrow + static_cast<int64_t>(iw) * g.c);
          } else {
#pragma unroll
            for (int j = 0; j < V; ++j) win[u].v[j] = store<T>(0.f);
          }
        }
#pragma unroll
        for (int kw = 0; kw < KW; ++kw) {
          const VT wv = *reinterpret_cast<const VT *>(w + (kh * KW + kw) * g.c + c0);
#pragma unroll
          for (int t = 0; t < TW; ++t)
#pragma unroll
            for (int j = 0; j < V; ++j)
              acc[t][j] = fmaf(load(win[t + kw].v[j]), load(wv.v[j]), acc[t][j]);
        }
      } else {
#pragma unroll kUnrollW
        for (int kw = 0; kw < kw_n; ++kw) {
          const VT wv = *reinterpret_cast<const VT *>(w + (kh * kw_n + kw) * g.c + c0);
          float wf[V];
#pragma unroll
          for (int j = 0; j < V; ++j) wf[j] = load(wv.v[j]);
#pragma unroll
          for (int t = 0; t < TW; ++t) {
            const int iw = (ow0 + t) * g.sw - g.pw + kw * g.dw;
            if (ow0 + t >= g.ow || iw < 0 || iw >= g.w) continue;
            const VT xv = *reinterpret_cast<const VT *>(xrow + static_cast<int64_t>(iw) * g.c);
#pragma unroll
            for (int j = 0; j < V; ++j) acc[t][j] = fmaf(load(xv.v[j]), wf[j], acc[t][j]);
          }
        }
      }
    }

    float b[V];
#pragma unroll
    for (int j = 0; j < V; ++j) b[j] = 0.f;
    if (bias != nullptr) {
      const VT bv = *reinterpret_cast<const VT *>(bias + c0);
#pragma unroll
      for (int j = 0; j < V; ++j) b[j] = load(bv.v[j]);
    }
#pragma unroll
    for (int t = 0; t < TW; ++t) {
      if (ow0 + t >= g.ow) break;
      const int64_t off = ((static_cast<int64_t>(n) * g.oh + oh) * g.ow + ow0 + t) * g.c + c0;
      VT res{};
      if (residual != nullptr) res = *reinterpret_cast<const VT *>(residual + off);
      VT out;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        float v = acc[t][j] + b[j];
        if (residual != nullptr) v += load(res.v[j]);
        out.v[j] = store<T>(activate(v, e));
      }
      *reinterpret_cast<VT *>(y + off) = out;
    }
  }
}

template <typename T, int V, int KH, int KW, bool kUnitW>
void launch_shape(const DwGeometry &g, const void *x, const void *w, const void *bias,
                  const void *residual, void *y, const DwEpilogue &e, cudaStream_t s) {
  constexpr int kTW = 4;
  const int64_t total = static_cast<int64_t>(g.n) * g.oh * ((g.ow + kTW - 1) / kTW) * (g.c / V);
  if (total <= 0) return;
  depthwise_nhwc_kernel<T, V, kTW, KH, KW, kUnitW><<<grid_for(total, 256), 256, 0, s>>>(
      static_cast<const T *>(x), static_cast<const T *>(w), static_cast<const T *>(bias),
      static_cast<const T *>(residual), static_cast<T *>(y), g, e, static_cast<uint32_t>(total));
  XRT_CUDA_LAUNCH_CHECK();
}

// The vectorized cases get kernels specialized for the usual square windows (with
// the register window when the width stride and dilation are 1); others, and the
// narrow vector widths, the runtime-window kernel.
template <typename T, int V>
void launch_typed(const DwGeometry &g, const void *x, const void *w, const void *bias,
                  const void *residual, void *y, const DwEpilogue &e, cudaStream_t s) {
  if constexpr (V * sizeof(T) == 16) {
    const bool unit_w = g.sw == 1 && g.dw == 1;
    if (g.kh == 3 && g.kw == 3)
      return unit_w ? launch_shape<T, V, 3, 3, true>(g, x, w, bias, residual, y, e, s)
                    : launch_shape<T, V, 3, 3, false>(g, x, w, bias, residual, y, e, s);
    if (g.kh == 5 && g.kw == 5)
      return unit_w ? launch_shape<T, V, 5, 5, true>(g, x, w, bias, residual, y, e, s)
                    : launch_shape<T, V, 5, 5, false>(g, x, w, bias, residual, y, e, s);
    if (g.kh == 7 && g.kw == 7 && unit_w)
      return launch_shape<T, V, 7, 7, true>(g, x, w, bias, residual, y, e, s);
  }
  launch_shape<T, V, 0, 0, false>(g, x, w, bias, residual, y, e, s);
}

bool aligned_to(const void *p, std::size_t a) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % a == 0;
}

}  // namespace

void launch_depthwise_nhwc(DType t, const DwGeometry &g, const void *x, const void *w,
                           const void *bias, const void *residual, void *y, const DwEpilogue &e,
                           void *stream) {
  cudaStream_t s = as_stream(stream);
  auto all_aligned = [&](std::size_t a) {
    return aligned_to(x, a) && aligned_to(w, a) && aligned_to(bias, a) && aligned_to(residual, a) &&
           aligned_to(y, a);
  };
  visit_dtype<TypeSet::kFloat>(t, "depthwise conv", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (sizeof(T) == 2) {
      if (g.c % 8 == 0 && all_aligned(16))
        return launch_typed<T, 8>(g, x, w, bias, residual, y, e, s);
      if (g.c % 2 == 0 && all_aligned(4))
        return launch_typed<T, 2>(g, x, w, bias, residual, y, e, s);
    } else if constexpr (sizeof(T) == 4) {
      if (g.c % 4 == 0 && all_aligned(16))
        return launch_typed<T, 4>(g, x, w, bias, residual, y, e, s);
    }
    launch_typed<T, 1>(g, x, w, bias, residual, y, e, s);
  });
}

}  // namespace xpuruntime::cuda_ops
