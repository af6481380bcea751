// Channels-last pooling (kernel "cpu_nhwc"): NhwcMaxPool, NhwcAveragePool over
// [N, D1.., C] with 1-3 spatial dimensions, NhwcGlobalAveragePool and
// NhwcGlobalMaxPool (schemas: cpp/src/ops/nhwc_pool.cpp), float32.
//
// C is innermost, so every window tap is a contiguous run of C values: the kernels
// reduce over taps with the channel loop innermost, in register-sized channel blocks
// (a compile-time width the compiler unrolls and vectorizes at each ISA clone's
// width), instead of pool.cpp's per-plane scalar windows. Semantics follow the NCHW
// kernels of pool.cpp exactly: a NaN anywhere in a max window gives NaN; a window
// with no input position gives -inf (max) or 0 (average); AveragePool divides by the
// positions inside the input, or with count_include_pad inside input + pads.
//
// Branch-free float code (selects) vectorizes only when comparisons may be
// speculated; results are identical, only FP exception flags could differ. -O3's
// unroll-and-jam pairs the tap loop's iterations into a scalar, branchy channel loop
// for the NaN-keeping maximum (GCC 12: 30x slower than the vectorized one), so it is
// off here. Before every include so inline helpers share these options and stay
// inlinable.
#pragma GCC optimize("no-trapping-math", "no-loop-unroll-and-jam")
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels/isa_clones.h"
#include "backends/cpu/kernels/parallel.h"
#include "backends/cpu/kernels/spatial.h"

namespace xpuruntime::cpu {
namespace {

// Channels per register block: kBlock accumulators (4 AVX-512 or 8 AVX2 registers),
// then blocks of kLanes, then a loop over the rest. The blocks have compile-time
// widths so the compiler unrolls them and keeps the accumulators in registers.
constexpr int64_t kBlock = 64;
constexpr int64_t kLanes = 16;
template <int64_t B>
using Width = std::integral_constant<int64_t, B>;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One step of a running maximum that keeps NaN (pool.cpp's nan_max_step): a NaN
// value replaces the maximum and a NaN maximum stays. `|` instead of `||` keeps it
// one select, so the channel loops vectorize.
inline float nan_max(float best, float v) { return ((v > best) | (v != v)) ? v : best; }

// What a window reduction computes: a float32 sum, a maximum, or a maximum that keeps
// NaN. The plain maximum (`v > best ? v : best`, one max instruction per vector) is
// exact for NaN-free data; the NaN-keeping one costs two compares, a mask OR and a
// blend per vector, so it runs only on images that hold a NaN.
enum class Reduce { kSum, kMax, kNanMax };

template <Reduce R>
inline float reduce_step(float acc, float v) {
  if constexpr (R == Reduce::kSum)
    return acc + v;
  else if constexpr (R == Reduce::kMax)
    return v > acc ? v : acc;
  else
    return nan_max(acc, v);
}

// The valid taps [k0, k1) of a window along one dimension, and how many of its
// positions lie inside input + pads (count_include_pad's divisor).
struct TapRange {
  int64_t k0 = 0, k1 = 0, padded = 0;
};

// Window geometry in exactly 3 spatial dimensions (leading unit dimensions for 1-D
// and 2-D pools, which change no result).
struct Geom {
  int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];

  explicit Geom(const ops::Spatial& g) {
    const int64_t lead = 3 - g.rank();
    for (int64_t i = 0; i < 3; ++i) {
      const bool unit = i < lead;
      const std::size_t j = static_cast<std::size_t>(unit ? 0 : i - lead);
      in[i] = unit ? 1 : g.in[j];
      out[i] = unit ? 1 : g.out[j];
      k[i] = unit ? 1 : g.k[j];
      s[i] = unit ? 1 : g.s[j];
      d[i] = unit ? 1 : g.d[j];
      pb[i] = unit ? 0 : g.pb[j];
      pe[i] = unit ? 0 : g.pe[j];
    }
  }

  // Window start of output index o along dimension i (negative inside the leading pad).
  int64_t start(int i, int64_t o) const { return o * s[i] - pb[i]; }

  TapRange taps(int i, int64_t o) const {
    const int64_t b = start(i, o);
    TapRange r;
    r.k0 = b >= 0 ? 0 : (-b + d[i] - 1) / d[i];
    // Last valid tap: b + k * d <= in - 1. A window starting past the input (ceil_mode)
    // has none; the check comes first because C++ division truncates toward zero.
    r.k1 = b > in[i] - 1 ? 0 : std::min(k[i], (in[i] - 1 - b) / d[i] + 1);
    r.k1 = std::max(r.k1, r.k0);
    const int64_t last = in[i] + pe[i] - 1 - b;  // last position inside input + pads
    r.padded = last < 0 ? 0 : std::min(k[i], last / d[i] + 1);
    return r;
  }
};

// Reduces the window taps x + offs[0..nt) over `w` channels into y: their maximum
// (NaN-propagating; -inf without taps) or their float32 sum in tap order divided by
// `div` (0 when div is 0, which happens only for a window without taps). W is a
// Width<B> or, for the channels left after the blocks, an int64_t below kLanes.
template <Reduce R, typename W>
inline void reduce_window(const float* x, const int64_t* offs, int64_t nt, float div, float* y,
                          W w) {
  constexpr bool kMax = R != Reduce::kSum;
  float acc[kBlock];
  if (nt == 0) {
    for (int64_t c = 0; c < w; ++c) acc[c] = kMax ? kNegInf : 0.0f;
  } else {
    const float* p = x + offs[0];
    for (int64_t c = 0; c < w; ++c) acc[c] = p[c];
  }
  for (int64_t t = 1; t < nt; ++t) {
    const float* p = x + offs[t];
    for (int64_t c = 0; c < w; ++c) acc[c] = reduce_step<R>(acc[c], p[c]);
  }
  if constexpr (kMax) {
    for (int64_t c = 0; c < w; ++c) y[c] = acc[c];
  } else {
    const float den = div > 0.0f ? div : 1.0f;
    for (int64_t c = 0; c < w; ++c) y[c] = acc[c] / den;
  }
}

template <Reduce R>
inline void reduce_window_channels(const float* x, const int64_t* offs, int64_t nt, float div,
                                   float* y, int64_t C) {
  int64_t c = 0;
  for (; c + kBlock <= C; c += kBlock)
    reduce_window<R>(x + c, offs, nt, div, y + c, Width<kBlock>{});
  for (; c + kLanes <= C; c += kLanes)
    reduce_window<R>(x + c, offs, nt, div, y + c, Width<kLanes>{});
  if (c < C) reduce_window<R>(x + c, offs, nt, div, y + c, C - c);
}

// Per image of x = [N, image values]: whether it holds a NaN. One vectorized pass,
// parallel over N x a fixed split of each image. On [1,112,112,64] 3x3/s2 this pass
// plus plain maxima measured ~10% faster than NaN-keeping maxima throughout (the pool
// is memory-bound; the pass also brings the input closer to the core).
std::vector<char> images_with_nan(const float* x, int64_t N, int64_t image) {
  constexpr int64_t kPieces = 8;
  std::vector<char> piece(static_cast<std::size_t>(N * kPieces), 0);
  parallel_for(N * kPieces, N * image, [&](int64_t t_begin, int64_t t_end) XRT_ISA_LAMBDA {
    for (int64_t t = t_begin; t < t_end; ++t) {
      const int64_t n = t / kPieces, j = t % kPieces;
      const float* xp = x + n * image;
      int bad = 0;
      for (int64_t i = image * j / kPieces; i < image * (j + 1) / kPieces; ++i)
        bad |= static_cast<int>(xp[i] != xp[i]);
      piece[t] = static_cast<char>(bad != 0);
    }
  });
  std::vector<char> out(static_cast<std::size_t>(N), 0);
  for (int64_t t = 0; t < N * kPieces; ++t) out[t / kPieces] |= piece[t];
  return out;
}

// NhwcMaxPool / NhwcAveragePool. Parallel over output pixels (N, O0, O1, O2) in
// contiguous chunks; a chunk walks its pixels row by row, listing the taps of the
// two outer dimensions once per row and those of the innermost per pixel.
template <bool kMax>
void pool_nhwc(const PoolAttrs& a, const TensorView& xv, TensorView& yv) {
  const Shape& xs = xv.shape;
  const int64_t N = xs.front(), C = xs.back();
  const Geom g(pool_geometry(a, ops::permuted(xs, ops::from_channels_last(xs.size()))));
  const int64_t pixels = N * g.out[0] * g.out[1] * g.out[2];
  if (pixels == 0 || C == 0) return;
  std::vector<TapRange> inner(static_cast<std::size_t>(g.out[2]));
  for (int64_t o = 0; o < g.out[2]; ++o) inner[o] = g.taps(2, o);
  const int64_t image = g.in[0] * g.in[1] * g.in[2] * C;
  // Valid taps of a window: at most min(k, in) per dimension (distinct positions inside
  // the input). That bounds the offset lists by the image even for a kernel_shape far
  // larger than it (padded), whose product could overflow.
  const int64_t rows_max = std::min(g.k[0], g.in[0]) * std::min(g.k[1], g.in[1]);
  const int64_t taps_max = rows_max * std::min(g.k[2], g.in[2]);
  const int64_t work = taps_max > 0 && pixels * C > std::numeric_limits<int64_t>::max() / taps_max
                           ? std::numeric_limits<int64_t>::max()
                           : pixels * C * taps_max;
  const bool include_pad = a.count_include_pad;
  const float* px = xv.ptr<const float>();
  float* py = yv.ptr<float>();
  const std::vector<char> nan_image = kMax ? images_with_nan(px, N, image) : std::vector<char>();
  parallel_for(pixels, work, [&](int64_t p_begin, int64_t p_end) XRT_ISA_LAMBDA {
    // Per row: the offsets of the valid (k0, k1) input rows; per pixel: every tap's.
    std::vector<int64_t> rows(static_cast<std::size_t>(rows_max));
    std::vector<int64_t> offs(static_cast<std::size_t>(taps_max));
    int64_t p = p_begin;
    while (p < p_end) {
      int64_t o2 = p % g.out[2], t = p / g.out[2];
      const int64_t o1 = t % g.out[1];
      t /= g.out[1];
      const int64_t o0 = t % g.out[0], n = t / g.out[0];
      const int64_t row_end = std::min(p_end, p + (g.out[2] - o2));
      const TapRange r0 = g.taps(0, o0), r1 = g.taps(1, o1);
      int64_t nrows = 0;
      for (int64_t k0 = r0.k0; k0 < r0.k1; ++k0) {
        const int64_t i0 = g.start(0, o0) + k0 * g.d[0];
        for (int64_t k1 = r1.k0; k1 < r1.k1; ++k1)
          rows[nrows++] = (i0 * g.in[1] + g.start(1, o1) + k1 * g.d[1]) * g.in[2] * C;
      }
      // count_include_pad's divisor in float: exact for any real window, and no
      // integer overflow for absurd kernel_shape/pads products.
      const float padded01 = static_cast<float>(r0.padded) * static_cast<float>(r1.padded);
      const float* xn = px + n * image;
      for (; p < row_end; ++p, ++o2) {
        const TapRange& r2 = inner[o2];
        const int64_t b2 = g.start(2, o2);
        int64_t nt = 0;
        for (int64_t j = 0; j < nrows; ++j)
          for (int64_t k2 = r2.k0; k2 < r2.k1; ++k2) offs[nt++] = rows[j] + (b2 + k2 * g.d[2]) * C;
        const float div =
            include_pad ? padded01 * static_cast<float>(r2.padded) : static_cast<float>(nt);
        float* y = py + p * C;
        if (!kMax)
          reduce_window_channels<Reduce::kSum>(xn, offs.data(), nt, div, y, C);
        else if (nan_image[n])
          reduce_window_channels<Reduce::kNanMax>(xn, offs.data(), nt, div, y, C);
        else
          reduce_window_channels<Reduce::kMax>(xn, offs.data(), nt, div, y, C);
      }
    }
  });
}

// Reduces `count` pixels (stride C) over `w` channels into y (W as reduce_window's):
// the NaN-propagating maximum, or the float32 sum in pixel order.
template <bool kMax, typename W>
inline void reduce_pixels(const float* x, int64_t count, int64_t C, float* y, W w) {
  float acc[kBlock];
  for (int64_t c = 0; c < w; ++c) acc[c] = kMax ? kNegInf : 0.0f;
  for (int64_t i = 0; i < count; ++i) {
    const float* p = x + i * C;
    for (int64_t c = 0; c < w; ++c) acc[c] = kMax ? nan_max(acc[c], p[c]) : acc[c] + p[c];
  }
  for (int64_t c = 0; c < w; ++c) y[c] = acc[c];
}

// Channels [0, w) of reduce_pixels, w <= kBlock.
template <bool kMax>
inline void reduce_pixels_block(const float* x, int64_t count, int64_t C, float* y, int64_t w) {
  if (w == kBlock) return reduce_pixels<kMax>(x, count, C, y, Width<kBlock>{});
  int64_t c = 0;
  for (; c + kLanes <= w; c += kLanes) reduce_pixels<kMax>(x + c, count, C, y + c, Width<kLanes>{});
  if (c < w) reduce_pixels<kMax>(x + c, count, C, y + c, w - c);
}

// NhwcGlobalMaxPool / NhwcGlobalAveragePool over x = [N, S pixels, C]. Tasks are
// (n, channel block of kBlock, pixel split); the pixel split exists only when
// N x channel blocks leave threads idle, and depends on the shape alone, so the bits
// do not depend on the thread count. Accumulation order (average): float32, each
// split's pixels in order, then the splits' partial sums in order, then / S.
template <bool kMax>
void global_pool_nhwc(const TensorView& xv, TensorView& yv) {
  const int64_t N = xv.shape.front(), C = xv.shape.back();
  if (N == 0 || C == 0) return;
  const int64_t S = xv.numel() / (N * C);
  const int64_t blocks = (C + kBlock - 1) / kBlock;
  constexpr int64_t kTasks = 8;  // enough for the threads a 2-16 core machine runs
  int64_t splits = 1;
  if (N * blocks < kTasks && N * S * C >= 2 * kParallelGrain)
    splits = std::min((kTasks + N * blocks - 1) / (N * blocks), std::max<int64_t>(1, S / 64));
  std::vector<float> part(static_cast<std::size_t>(splits > 1 ? N * splits * C : 0));
  const float* px = xv.ptr<const float>();
  float* py = yv.ptr<float>();
  const float den = static_cast<float>(S);
  parallel_for(N * blocks * splits, N * S * C, [&](int64_t t_begin, int64_t t_end) XRT_ISA_LAMBDA {
    for (int64_t t = t_begin; t < t_end; ++t) {
      const int64_t j = t % splits, u = t / splits;
      const int64_t c0 = (u % blocks) * kBlock, n = u / blocks;
      const int64_t s0 = S * j / splits, s1 = S * (j + 1) / splits;
      const float* x = px + (n * S + s0) * C + c0;
      float* y = splits > 1 ? part.data() + (n * splits + j) * C + c0 : py + n * C + c0;
      const int64_t w = std::min(kBlock, C - c0);
      reduce_pixels_block<kMax>(x, s1 - s0, C, y, w);
      if (!kMax && splits == 1)
        for (int64_t c = 0; c < w; ++c) y[c] /= den;  // S = 0: 0 / 0 = NaN, as pool.cpp
    }
  });
  if (splits == 1) return;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const float* pp = part.data() + n * splits * C + c;
      float acc = pp[0];
      for (int64_t j = 1; j < splits; ++j) acc = kMax ? nan_max(acc, pp[j * C]) : acc + pp[j * C];
      py[n * C + c] = kMax ? acc : acc / den;
    }
}

OpDef pool_def(const std::string& type, bool is_max) {
  OpDef d;
  d.op_type = type;
  d.kernel = "cpu_nhwc";
  d.dtypes = {DType::kFloat32};  // the schema also takes the 16-bit floats (CUDA's kernels)
  set_parsed_body<PoolAttrs>(
      d, [is_max](const PoolAttrs& a, const Node&, const std::vector<TensorView>& in,
                  std::vector<TensorView>& out) {
        if (is_max)
          pool_nhwc<true>(a, in[0], out[0]);
        else
          pool_nhwc<false>(a, in[0], out[0]);
      });
  return d;
}

OpDef global_pool_def(const std::string& type, bool is_max) {
  OpDef d;
  d.op_type = type;
  d.kernel = "cpu_nhwc";
  d.dtypes = {DType::kFloat32};
  d.run = [is_max](const Node&, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
    if (is_max)
      global_pool_nhwc<true>(in[0], out[0]);
    else
      global_pool_nhwc<false>(in[0], out[0]);
  };
  return d;
}

}  // namespace

void register_nhwc_pool_ops(std::vector<OpDef>& defs) {
  defs.push_back(pool_def("NhwcMaxPool", true));
  defs.push_back(pool_def("NhwcAveragePool", false));
  defs.push_back(global_pool_def("NhwcGlobalAveragePool", false));
  defs.push_back(global_pool_def("NhwcGlobalMaxPool", true));
}

}  // namespace xpuruntime::cpu
