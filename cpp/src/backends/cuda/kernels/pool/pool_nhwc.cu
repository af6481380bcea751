// Channels-last pooling: NhwcMaxPool / NhwcAveragePool (windowed, 1-3 spatial
// dims as 3-D with leading unit dims) and NhwcGlobalMaxPool /
// NhwcGlobalAveragePool. Without them every pool of a channels-last network (a
// ResNet stem's MaxPool, the squeeze-excitation pools of EfficientNet and
// MobileNetV3, a classifier's global pool) needed a Transpose of its whole
// input back to NCHW. Channels are innermost, so a thread takes V contiguous
// channels with 16-byte loads and neighbouring threads neighbouring channel
// vectors (coalesced); fp32 accumulation.
#include <cmath>
#include <type_traits>

#include "backends/cuda/kernels/common/device_types.cuh"
#include "backends/cuda/kernels/pool/pool_impl.h"

namespace xpuruntime::cuda_ops {
namespace {

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// MaxPool's order, as the CPU kernels: a NaN wins, else the first valid value,
// then strictly larger ones.
__device__ __forceinline__ float max_step(float acc, float v, bool first) {
  if (first || v != v) return v;
  return (acc == acc && v > acc) ? v : acc;
}

template <typename T, int V, bool kMax>
__global__ void nhwc_pool_kernel(const T *__restrict__ x, T *__restrict__ y, PoolGeometry g,
                                 int64_t channels, bool include_pad, int64_t total) {
  using VT = Vec<T, V>;
  const int64_t vectors = channels / V;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += step) {
    const int64_t cv = i % vectors;
    int64_t r = i / vectors;
    int64_t o[3];
    o[2] = r % g.out[2];
    r /= g.out[2];
    o[1] = r % g.out[1];
    r /= g.out[1];
    o[0] = r % g.out[0];
    const int64_t n = r / g.out[0];
    float acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = kMax ? -INFINITY : 0.f;
    int64_t inside = 0, padded = 0;
    for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
      const int64_t i0 = o[0] * g.s[0] - g.pb[0] + k0 * g.d[0];
      for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
        const int64_t i1 = o[1] * g.s[1] - g.pb[1] + k1 * g.d[1];
        for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
          const int64_t i2 = o[2] * g.s[2] - g.pb[2] + k2 * g.d[2];
          const bool in_pads = i0 >= -g.pb[0] && i0 < g.in[0] + g.pe[0] && i1 >= -g.pb[1] &&
                               i1 < g.in[1] + g.pe[1] && i2 >= -g.pb[2] && i2 < g.in[2] + g.pe[2];
          padded += in_pads;
          if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] || i2 < 0 || i2 >= g.in[2])
            continue;
          const VT v = *reinterpret_cast<const VT *>(
              x + (((n * g.in[0] + i0) * g.in[1] + i1) * g.in[2] + i2) * channels + cv * V);
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float f = load(v.v[j]);
            acc[j] = kMax ? max_step(acc[j], f, inside == 0) : acc[j] + f;
          }
          ++inside;
        }
      }
    }
    VT out;
    const int64_t divisor = include_pad ? padded : inside;
#pragma unroll
    for (int j = 0; j < V; ++j)
      out.v[j] =
          store<T>(kMax ? acc[j] : (divisor > 0 ? acc[j] / static_cast<float>(divisor) : 0.f));
    *reinterpret_cast<VT *>(y + i * V) = out;
  }
}

// [n, pixels, C] -> [n, C]: block (TX channel vectors, TY pixel lanes), one
// block per (image, TX vectors); the lanes' partials meet in shared memory.
// Global pool: a block per (channel-vector tile, image, pixel chunk). Pixel lanes
// (threadIdx.y) reduce into shared memory; with one chunk the block writes y, with
// several it writes fp32 partials [n][chunk][C] that nhwc_global_pool_merge sums in
// chunk order (the same bits run to run). Chunks keep the SMs busy where images are
// few and large (an SE block's squeeze on 112x112 pixels of 32 channels was 32 blocks
// of 256 threads for 132 SMs: 24 us).
template <typename T, int V, bool kMax, bool kPartial>
__global__ void nhwc_global_pool_kernel(const T *__restrict__ x, T *__restrict__ y,
                                        float *__restrict__ part, int64_t pixels, int64_t channels,
                                        int64_t chunk) {
  using VT = Vec<T, V>;
  extern __shared__ float partial[];  // [TY][TX][V]
  const int64_t vectors = channels / V;
  const int64_t n = blockIdx.y;
  const int64_t cv = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t p0 = static_cast<int64_t>(blockIdx.z) * chunk;
  const int64_t p1 = p0 + chunk < pixels ? p0 + chunk : pixels;
  float acc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = kMax ? -INFINITY : 0.f;
  if (cv < vectors) {
    bool first = true;
    for (int64_t p = p0 + threadIdx.y; p < p1; p += blockDim.y) {
      const VT v = *reinterpret_cast<const VT *>(x + (n * pixels + p) * channels + cv * V);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float f = load(v.v[j]);
        acc[j] = kMax ? max_step(acc[j], f, first) : acc[j] + f;
      }
      first = false;
    }
  }
  float *mine = partial + (threadIdx.y * blockDim.x + threadIdx.x) * V;
#pragma unroll
  for (int j = 0; j < V; ++j) mine[j] = acc[j];
  __syncthreads();
  if (threadIdx.y != 0 || cv >= vectors) return;
  const int64_t count = p1 - p0;
  const int lanes = static_cast<int>(count < static_cast<int64_t>(blockDim.y) ? count : blockDim.y);
  float out[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    float a = partial[threadIdx.x * V + j];
    for (int l = 1; l < lanes; ++l) {
      const float f = partial[(l * blockDim.x + threadIdx.x) * V + j];
      a = kMax ? max_step(a, f, false) : a + f;
    }
    out[j] = a;
  }
  if constexpr (kPartial) {
    float *dst = part + (n * gridDim.z + blockIdx.z) * channels + cv * V;
#pragma unroll
    for (int j = 0; j < V; ++j) dst[j] = out[j];
  } else {
    VT o;
#pragma unroll
    for (int j = 0; j < V; ++j)
      o.v[j] = store<T>(kMax ? out[j] : out[j] / static_cast<float>(pixels));
    *reinterpret_cast<VT *>(y + n * channels + cv * V) = o;
  }
}

// y[n][c] from the chunks' partials, summed (or maxed) in chunk order.
template <typename T, bool kMax>
__global__ void nhwc_global_pool_merge(const float *__restrict__ part, T *__restrict__ y, int64_t n,
                                       int64_t channels, int64_t chunks, int64_t pixels) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * channels) return;
  const int64_t img = i / channels, c = i - img * channels;
  const float *src = part + img * chunks * channels + c;
  float a = src[0];
  for (int64_t k = 1; k < chunks; ++k) {
    const float f = src[k * channels];
    a = kMax ? max_step(a, f, false) : a + f;
  }
  y[i] = store<T>(kMax ? a : a / static_cast<float>(pixels));
}

// Pixel chunks of a global pool: at least 256 pixels each (split_chunks).
int64_t global_pool_chunks(int64_t blocks, int64_t pixels) {
  return split_chunks(blocks, pixels, 256);
}

int64_t global_pool_tile(int64_t vectors) { return vectors < 32 ? vectors : 32; }

bool aligned_to(const void *p, std::size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// Calls f(std::integral_constant<int, V>) with the widest channel vector that
// divides C and both pointers' alignment.
template <typename T, typename F>
void with_vector(int64_t channels, const void *x, const void *y, F &&f) {
  if constexpr (sizeof(T) == 2) {
    if (channels % 8 == 0 && aligned_to(x, 16) && aligned_to(y, 16))
      return f(std::integral_constant<int, 8>{});
  } else if constexpr (sizeof(T) == 4) {
    if (channels % 4 == 0 && aligned_to(x, 16) && aligned_to(y, 16))
      return f(std::integral_constant<int, 4>{});
  }
  f(std::integral_constant<int, 1>{});
}

}  // namespace

void launch_nhwc_pool(DType t, bool is_max, bool count_include_pad, const PoolGeometry &g,
                      int64_t channels, const void *x, void *y, void *stream) {
  visit_dtype<TypeSet::kFloat>(t, "channels-last pool", [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_vector<T>(channels, x, y, [&](auto vc) {
      constexpr int V = decltype(vc)::value;
      const int64_t total = g.planes * g.out[0] * g.out[1] * g.out[2] * (channels / V);
      if (total <= 0) return;
      auto *px = static_cast<const T *>(x);
      auto *py = static_cast<T *>(y);
      if (is_max)
        nhwc_pool_kernel<T, V, true><<<grid_for(total, 256), 256, 0, as_stream(stream)>>>(
            px, py, g, channels, count_include_pad, total);
      else
        nhwc_pool_kernel<T, V, false><<<grid_for(total, 256), 256, 0, as_stream(stream)>>>(
            px, py, g, channels, count_include_pad, total);
      XRT_CUDA_LAUNCH_CHECK();
    });
  });
}

std::size_t nhwc_global_pool_workspace_bytes(int64_t n, int64_t pixels, int64_t channels) {
  if (n <= 0 || channels <= 0 || pixels <= 0) return 0;
  // The fewest blocks (one channel tile per image) give the most chunks.
  const int64_t most = global_pool_chunks(n, pixels);
  return most <= 1 ? 0 : static_cast<std::size_t>(n * most * channels) * sizeof(float);
}

void launch_nhwc_global_pool(DType t, bool is_max, int64_t n, int64_t pixels, int64_t channels,
                             const void *x, void *y, void *workspace, std::size_t workspace_bytes,
                             void *stream) {
  if (n <= 0 || channels <= 0) return;
  XRT_CHECK(n < 65536, InvalidArgumentError, "channels-last global pool: batch ", n,
            " is above 65535");
  visit_dtype<TypeSet::kFloat>(t, "channels-last global pool", [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_vector<T>(channels, x, y, [&](auto vc) {
      constexpr int V = decltype(vc)::value;
      const int64_t vectors = channels / V;
      const int tx = static_cast<int>(global_pool_tile(vectors));
      const int ty = 256 / tx;
      const int64_t tiles = (vectors + tx - 1) / tx;
      auto *px = static_cast<const T *>(x);
      auto *py = static_cast<T *>(y);
      cudaStream_t s = as_stream(stream);
      if (pixels <= 0) {
        XRT_CUDA_CHECK(
            cudaMemsetAsync(py, 0, static_cast<std::size_t>(n * channels) * sizeof(T), s));
        return;
      }
      int64_t chunks = global_pool_chunks(tiles * n, pixels);
      if (chunks > 1 &&
          (workspace == nullptr ||
           workspace_bytes < static_cast<std::size_t>(n * chunks * channels) * sizeof(float)))
        chunks = 1;  // a run whose shape outgrew the workspace sized at prepare
      const int64_t chunk = (pixels + chunks - 1) / chunks;
      const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(n),
                      static_cast<unsigned>(chunks));
      const std::size_t smem = static_cast<std::size_t>(tx) * ty * V * sizeof(float);
      auto *part = static_cast<float *>(workspace);
      auto launch = [&](auto max_tag, auto partial_tag) {
        constexpr bool kMax = decltype(max_tag)::value, kPart = decltype(partial_tag)::value;
        nhwc_global_pool_kernel<T, V, kMax, kPart>
            <<<grid, dim3(tx, ty), smem, s>>>(px, py, part, pixels, channels, chunk);
        XRT_CUDA_LAUNCH_CHECK();
        if constexpr (kPart) {
          const int64_t outs = n * channels;
          nhwc_global_pool_merge<T, kMax><<<static_cast<unsigned>((outs + 255) / 256), 256, 0, s>>>(
              part, py, n, channels, chunks, pixels);
          XRT_CUDA_LAUNCH_CHECK();
        }
      };
      using True = std::true_type;
      using False = std::false_type;
      if (is_max)
        chunks > 1 ? launch(True{}, True{}) : launch(True{}, False{});
      else
        chunks > 1 ? launch(False{}, True{}) : launch(False{}, False{});
    });
  });
}

}  // namespace xpuruntime::cuda_ops
