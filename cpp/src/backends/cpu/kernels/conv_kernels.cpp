// See conv_kernels.h. The AVX2 functions carry target attributes (the library is
// built for baseline x86-64) and run only when the CPU reports AVX2 and FMA.
// Activations are written with the same comparisons as elementwise.h's unary_op
// (max/min operand order chosen so NaN and signed zeros come out the same).
#pragma GCC optimize("no-trapping-math")
#include "backends/cpu/kernels/conv_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/matmul/cpu_gemm_impl.h"

#define XRT_AVX2 __attribute__((target("avx2,fma")))

namespace xpuruntime::cpu {
namespace {

using Act = ConvEpilogue::Act;

inline float act_scalar(Act a, const ConvEpilogue& e, float x) {
  switch (a) {
    case Act::kRelu: return x < 0.f ? 0.f : x;  // NaN stays NaN
    case Act::kClip: {
      const float v = x < e.lo ? e.lo : x;
      return v > e.hi ? e.hi : v;
    }
    case Act::kHardSigmoid: {
      const float v = e.alpha * x + e.beta;
      return v < 0.f ? 0.f : (v > 1.f ? 1.f : v);
    }
    case Act::kHardSwish: {
      float v = x / 6.f + 0.5f;
      v = v < 0.f ? 0.f : (v > 1.f ? 1.f : v);
      return x * v;
    }
    case Act::kLeakyRelu: return x >= 0.f ? x : x * e.alpha;
    default: return x;
  }
}

// src (row stride lds) may be y itself (lds == ld).
template <Act A>
void epilogue_rows_portable(const ConvEpilogue& e, const float* src, int64_t lds, float* y,
                            int64_t rows, int64_t cols, int64_t ld, const float* bias,
                            const float* sum) {
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * ld;
    const float* xr = src + r * lds;
    const float b = bias ? bias[r] : 0.f;
    if (sum) {
      const float* sr = sum + r * ld;
      for (int64_t i = 0; i < cols; ++i) yr[i] = act_scalar(A, e, xr[i] + b + sr[i]);
    } else {
      for (int64_t i = 0; i < cols; ++i) yr[i] = act_scalar(A, e, xr[i] + b);
    }
    if (A == Act::kOther) run_unary(e.unary, e.params, DType::kFloat32, yr, yr, cols);
  }
}

// ---- AVX2 ---------------------------------------------------------------------

alignas(32) const int32_t kMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

struct VecParams {
  __m256 lo, hi, alpha, beta, zero, one, six, half;
};

XRT_AVX2 inline VecParams vec_params(const ConvEpilogue& e) {
  return {_mm256_set1_ps(e.lo),  _mm256_set1_ps(e.hi),  _mm256_set1_ps(e.alpha),
          _mm256_set1_ps(e.beta), _mm256_setzero_ps(),   _mm256_set1_ps(1.f),
          _mm256_set1_ps(6.f),   _mm256_set1_ps(0.5f)};
}

// first lanes of a tail vector: rem in [1, 8]
XRT_AVX2 inline __m256i tail_mask(int64_t rem) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskTable + 8 - rem));
}

template <Act A>
XRT_AVX2 inline __m256 act_vec(const VecParams& p, __m256 x) {
  if constexpr (A == Act::kRelu) {
    return _mm256_max_ps(p.zero, x);  // 0 > x ? 0 : x: NaN (second operand) passes
  } else if constexpr (A == Act::kClip) {
    return _mm256_min_ps(p.hi, _mm256_max_ps(p.lo, x));
  } else if constexpr (A == Act::kHardSigmoid) {
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(p.alpha, x), p.beta);
    return _mm256_max_ps(p.zero, _mm256_min_ps(p.one, v));
  } else if constexpr (A == Act::kHardSwish) {
    __m256 v = _mm256_add_ps(_mm256_div_ps(x, p.six), p.half);
    v = _mm256_max_ps(p.zero, _mm256_min_ps(p.one, v));
    return _mm256_mul_ps(x, v);
  } else if constexpr (A == Act::kLeakyRelu) {
    return _mm256_blendv_ps(_mm256_mul_ps(x, p.alpha), x, _mm256_cmp_ps(x, p.zero, _CMP_GE_OQ));
  } else {
    return x;
  }
}

template <Act A>
XRT_AVX2 void epilogue_rows_avx2(const ConvEpilogue& e, const float* src, int64_t lds, float* y,
                                 int64_t rows, int64_t cols, int64_t ld, const float* bias,
                                 const float* sum) {
  const VecParams p = vec_params(e);
  const int64_t full = cols / 8 * 8;
  const __m256i mask = tail_mask(cols - full > 0 ? cols - full : 8);
  const bool spill = ld == cols && lds >= cols && src != y;
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * ld;
    const float* xr = src + r * lds;
    const float* sr = sum ? sum + r * ld : nullptr;
    const __m256 vb = _mm256_set1_ps(bias ? bias[r] : 0.f);
    for (int64_t i = 0; i < full; i += 8) {
      __m256 v = _mm256_add_ps(_mm256_loadu_ps(xr + i), vb);
      if (sr) v = _mm256_add_ps(v, _mm256_loadu_ps(sr + i));
      _mm256_storeu_ps(yr + i, act_vec<A>(p, v));
    }
    if (full < cols && spill && r + 1 < rows) {
      // Dense rows from another buffer: the whole vector's extra lanes land at the
      // next row's start, stored after this (masked stores are slow on AMD).
      __m256 v = _mm256_add_ps(_mm256_loadu_ps(xr + full), vb);
      if (sr) v = _mm256_add_ps(v, _mm256_loadu_ps(sr + full));
      _mm256_storeu_ps(yr + full, act_vec<A>(p, v));
    } else if (full < cols) {
      __m256 v = _mm256_add_ps(_mm256_maskload_ps(xr + full, mask), vb);
      if (sr) v = _mm256_add_ps(v, _mm256_maskload_ps(sr + full, mask));
      _mm256_maskstore_ps(yr + full, mask, act_vec<A>(p, v));
    }
    if (A == Act::kOther) run_unary(e.unary, e.params, DType::kFloat32, yr, yr, cols);
  }
}

// The zero-padded, phase-split copy of an input plane: for input row ih and phase
// q (< sw), entry j holds padded column j * sw + q (input column j * sw + q - pw).
// Tap kw of output column o then reads phase (kw·dw) mod sw at j = o + kw·dw / sw:
// contiguous for every stride. Rows are phase_len() long, enough for whole vectors
// past the last output column; the slack is zero so it stays finite. Strides 1 and
// 2 (nearly all depthwise layers) copy whole vectors, 2 deinterleaving in registers.
XRT_AVX2 void fill_phases(const DwGeom& g, const float* x, float* buf) {
  const int64_t len = g.phase_len();
  // Padded rows: row pr holds input row pr - ph, or zeros (top/bottom padding), so
  // every tap of every output row reads a row and the kernel tests nothing. Only
  // padding is zeroed, by whole-vector stores (GCC's memset for a whole-buffer
  // loop cost as much as the convolution on 56×56 planes). The bounds live in
  // locals: vector stores may alias g, which made the compiler reload them.
  const int64_t rows = g.padded_rows(), sw = g.sw, w = g.w, pw = g.pw;
  const __m256 zero = _mm256_setzero_ps();
  const int64_t ih0 = std::max<int64_t>(0, -g.ph), ih1 = std::max(ih0, std::min(g.h, rows - g.ph));
  for (int64_t j = 0, n = std::min(rows, ih0 + g.ph) * sw * len; j < n; j += 8) _mm256_storeu_ps(buf + j, zero);
  for (int64_t j = std::min(rows, ih1 + g.ph) * sw * len, n = rows * sw * len; j < n; j += 8)
    _mm256_storeu_ps(buf + j, zero);
  for (int64_t ih = ih0; ih < ih1; ++ih) {
    const float* xr = x + ih * w;
    float* row = buf + (ih + g.ph) * sw * len;
    // Entries j whose source column j·sw + q - pw lies in [0, w), for q = 0.
    if (sw == 1) {
      const int64_t j0 = std::min(len, pw), n = std::min(w, len - j0);
      // Zeros right of the data (from the row's end back), left of it, then the
      // data over them.
      for (int64_t j = len - 8; j >= 0 && j + 8 > j0 + n; j -= 8) _mm256_storeu_ps(row + j, zero);
      for (int64_t j = 0; j < j0; j += 8) _mm256_storeu_ps(row + j, zero);
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) _mm256_storeu_ps(row + j0 + i, _mm256_loadu_ps(xr + i));
      if (i < n) {
        // The masked lanes load as zero, so a whole store only rewrites padding
        // (masked stores are slow on AMD cores); the row has room past the data.
        const __m256i mask = tail_mask(n - i);
        const __m256 v = _mm256_maskload_ps(xr + i, mask);
        if (j0 + i + 8 <= len) _mm256_storeu_ps(row + j0 + i, v);
        else _mm256_maskstore_ps(row + j0 + i, mask, v);
      }
      continue;
    }
    if (sw == 2) {
      // Both phases by whole vectors straight from the input row: block j reads
      // input columns 2j - pw + [0, 16) and splits even/odd. Blocks reaching past
      // either end of the row load only the lanes inside it (masked lanes read as
      // zero and never fault), so there are no per-element edge tests, which
      // dominated on the small planes of late stride-2 layers. (Staging the row in
      // a padded copy instead stalled every load on store forwarding.)
      const __m256i idx0 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      const __m256i idx1 = _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15);
      for (int64_t j = 0; j < len; j += 8) {
        const int64_t first = 2 * j - pw;  // input column of lane 0
        const float* src = reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(xr) + first * 4);
        __m256 a, b;
        if (first >= 0 && first + 16 <= w) {
          a = _mm256_loadu_ps(src);
          b = _mm256_loadu_ps(src + 8);
        } else {
          // Lanes l with 0 <= first + l < w.
          const __m256i lo = _mm256_set1_epi32(static_cast<int32_t>(std::clamp<int64_t>(-first, 0, 16) - 1));
          const __m256i hi = _mm256_set1_epi32(static_cast<int32_t>(std::clamp<int64_t>(w - first, 0, 16)));
          const __m256i ma = _mm256_and_si256(_mm256_cmpgt_epi32(idx0, lo), _mm256_cmpgt_epi32(hi, idx0));
          const __m256i mb = _mm256_and_si256(_mm256_cmpgt_epi32(idx1, lo), _mm256_cmpgt_epi32(hi, idx1));
          a = _mm256_maskload_ps(src, ma);
          b = _mm256_maskload_ps(src + 8, mb);
        }
        // shuffle picks within 128-bit lanes: a0 a2 b0 b2 | a4 a6 b4 b6; the 64-bit
        // permute restores order.
        const __m256 ev = _mm256_shuffle_ps(a, b, 0x88), od = _mm256_shuffle_ps(a, b, 0xDD);
        _mm256_storeu_ps(row + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), 0xD8)));
        _mm256_storeu_ps(row + len + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), 0xD8)));
      }
      continue;
    }
    for (int64_t j = 0; j < sw * len; j += 8) _mm256_storeu_ps(row + j, zero);
    for (int64_t q = 0; q < sw; ++q) {
      float* dst = row + q * len;
      for (int64_t j = 0; j < len; ++j) {
        const int64_t iw = j * sw + q - pw;
        if (iw >= 0 && iw < w) dst[j] = xr[iw];
      }
    }
  }
}

constexpr int kMaxTaps = 16;  // per kernel dimension; conv.cpp falls back beyond

// V vectors of one output row from column o: accumulate every valid tap, add the
// residual, activate, store (the last vector masked when kMasked).
// R output rows × V vectors from column o (R·V <= 8): accumulate every tap, add
// the residual, activate, store. Blocks of rows give every plane width at least
// four independent FMA chains (one chain per vector would wait on FMA latency).
// A vector past the row's end (the row's partial last vector) is stored whole:
// its extra lanes land in the next rows, which are stored after it (the caller
// stores a block's partial vector first). Only a store past the end of the plane
// (another thread's) is masked — masked stores are slow on AMD cores.
// Accumulators are named, not an array: GCC stores an array's copy to memory on
// every tap.
template <Act A, int R, int V>
XRT_AVX2 inline void dw_block(const float* base, int64_t row_step, int64_t kh_step, const float* w,
                              int64_t kh, int64_t kw, const int64_t* coff, int64_t o, __m256 vb,
                              const VecParams& p, int64_t plane, const float* sr, float* yr,
                              int64_t ow) {
  static_assert(R * V <= 8, "eight accumulators");
  __m256 a0 = vb, a1 = vb, a2 = vb, a3 = vb, a4 = vb, a5 = vb, a6 = vb, a7 = vb;
  // Accumulator q = r·V + v reads row r, vector v.
  auto at = [&](int q) { return (q / V) * row_step + 8 * (q % V); };
  for (int64_t i = 0; i < kh; ++i) {
    const float* rb = base + i * kh_step + o;
    const float* wr = w + i * kw;
    for (int64_t j = 0; j < kw; ++j) {
      const __m256 wv = _mm256_broadcast_ss(wr + j);
      const float* src = rb + coff[j];
      a0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src + at(0)), a0);
      if constexpr (R * V > 1) a1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src + at(1)), a1);
      if constexpr (R * V > 2) a2 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src + at(2)), a2);
      if constexpr (R * V > 3) a3 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src + at(3)), a3);
      if constexpr (R * V > 4) a4 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src + at(4)), a4);
      if constexpr (R * V > 5) a5 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src + at(5)), a5);
      if constexpr (R * V > 6) a6 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src + at(6)), a6);
      if constexpr (R * V > 7) a7 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src + at(7)), a7);
    }
  }
  const __m256 acc[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
  for (int q = 0; q < R * V; ++q) {
    const int64_t off = (q / V) * ow + o + 8 * (q % V);
    const bool masked = off + 8 > plane;
    const __m256i mask = tail_mask(masked ? plane - off : 8);
    __m256 t = acc[q];
    if (sr) t = _mm256_add_ps(t, masked ? _mm256_maskload_ps(sr + off, mask) : _mm256_loadu_ps(sr + off));
    t = act_vec<A>(p, t);
    if (masked) _mm256_maskstore_ps(yr + off, mask, t);
    else _mm256_storeu_ps(yr + off, t);
  }
}

// One block of R rows: the partial vector first (its spill is overwritten by the
// full vectors of the next rows), then pairs of full vectors, then a single one.
template <Act A, int R>
XRT_AVX2 void dw_rows(const DwGeom& g, const float* base, int64_t row_step, int64_t kh_step,
                      const float* w, const int64_t* coff, __m256 vb, const VecParams& p,
                      int64_t left, const float* sr, float* yr) {
  // Offsets are relative to the block's first row; `left` floats of the plane
  // remain from there.
  const int64_t full = g.ow / 8 * 8;
  if (full < g.ow) dw_block<A, R, 1>(base, row_step, kh_step, w, g.kh, g.kw, coff, full, vb, p, left, sr, yr, g.ow);
  int64_t o = 0;
  for (; o + 16 <= full; o += 16)
    dw_block<A, R, 2>(base, row_step, kh_step, w, g.kh, g.kw, coff, o, vb, p, left, sr, yr, g.ow);
  if (o < full) dw_block<A, R, 1>(base, row_step, kh_step, w, g.kh, g.kw, coff, o, vb, p, left, sr, yr, g.ow);
}

template <Act A>
XRT_AVX2 void depthwise_plane_avx2(const DwGeom& g, const float* x, const float* w, float bias,
                                   const float* sum, const ConvEpilogue& e, float* y, float* buf) {
  fill_phases(g, x, buf);
  const int64_t len = g.phase_len();
  int64_t coff[kMaxTaps];
  for (int64_t j = 0; j < g.kw; ++j) coff[j] = (j * g.dw) % g.sw * len + j * g.dw / g.sw;
  const VecParams p = vec_params(e);
  const __m256 vb = _mm256_set1_ps(bias);
  const int64_t row_step = g.sh * g.sw * len, kh_step = g.dh * g.sw * len;
  for (int64_t oh = 0; oh < g.oh;) {
    const int64_t r = std::min<int64_t>(4, g.oh - oh);
    const float* base = buf + oh * row_step;
    const float* sr = sum ? sum + oh * g.ow : nullptr;
    float* yr = y + oh * g.ow;
    const int64_t left = (g.oh - oh) * g.ow;
    switch (r) {
      case 4: dw_rows<A, 4>(g, base, row_step, kh_step, w, coff, vb, p, left, sr, yr); break;
      case 3: dw_rows<A, 3>(g, base, row_step, kh_step, w, coff, vb, p, left, sr, yr); break;
      case 2: dw_rows<A, 2>(g, base, row_step, kh_step, w, coff, vb, p, left, sr, yr); break;
      default: dw_rows<A, 1>(g, base, row_step, kh_step, w, coff, vb, p, left, sr, yr); break;
    }
    oh += r;
  }
  if (A == Act::kOther) run_unary(e.unary, e.params, DType::kFloat32, y, y, g.oh * g.ow);
}

XRT_AVX2 void gemv_avx2(const float* a, int64_t rows, int64_t k, const float* x, float* y) {
  const int64_t full = k / 8 * 8;
  const __m256i mask = tail_mask(k - full > 0 ? k - full : 8);
  auto hsum = [](__m256 v) XRT_AVX2 {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  };
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* a0 = a + r * k;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t i = 0; i < full; i += 8) {
      const __m256 xv = _mm256_loadu_ps(x + i);
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + i), xv, s0);
      s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + k + i), xv, s1);
      s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + 2 * k + i), xv, s2);
      s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + 3 * k + i), xv, s3);
    }
    if (full < k) {
      const __m256 xv = _mm256_maskload_ps(x + full, mask);
      s0 = _mm256_fmadd_ps(_mm256_maskload_ps(a0 + full, mask), xv, s0);
      s1 = _mm256_fmadd_ps(_mm256_maskload_ps(a0 + k + full, mask), xv, s1);
      s2 = _mm256_fmadd_ps(_mm256_maskload_ps(a0 + 2 * k + full, mask), xv, s2);
      s3 = _mm256_fmadd_ps(_mm256_maskload_ps(a0 + 3 * k + full, mask), xv, s3);
    }
    y[r] = hsum(s0);
    y[r + 1] = hsum(s1);
    y[r + 2] = hsum(s2);
    y[r + 3] = hsum(s3);
  }
  for (; r < rows; ++r) {
    const float* a0 = a + r * k;
    __m256 s0 = _mm256_setzero_ps();
    for (int64_t i = 0; i < full; i += 8)
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + i), _mm256_loadu_ps(x + i), s0);
    if (full < k)
      s0 = _mm256_fmadd_ps(_mm256_maskload_ps(a0 + full, mask), _mm256_maskload_ps(x + full, mask), s0);
    y[r] = hsum(s0);
  }
}

bool use_avx2() {
  static const bool yes = matmul::cpu_has_avx2_fma();
  return yes;
}

template <template <Act> class F, typename... Args>
void dispatch_act(Act a, Args&&... args) {
  switch (a) {
    case Act::kNone: return F<Act::kNone>::run(args...);
    case Act::kRelu: return F<Act::kRelu>::run(args...);
    case Act::kClip: return F<Act::kClip>::run(args...);
    case Act::kHardSigmoid: return F<Act::kHardSigmoid>::run(args...);
    case Act::kHardSwish: return F<Act::kHardSwish>::run(args...);
    case Act::kLeakyRelu: return F<Act::kLeakyRelu>::run(args...);
    default: return F<Act::kOther>::run(args...);
  }
}

template <Act A>
struct EpilogueRows {
  template <typename... Args>
  static void run(Args... args) {
    if (use_avx2()) epilogue_rows_avx2<A>(args...);
    else epilogue_rows_portable<A>(args...);
  }
};

template <Act A>
struct DepthwisePlane {
  template <typename... Args>
  static void run(Args... args) {
    depthwise_plane_avx2<A>(args...);
  }
};

}  // namespace

ConvEpilogue ConvEpilogue::of(bool has_act, Unary k, const UnaryParams& p) {
  ConvEpilogue e;
  e.unary = k;
  e.params = p;
  e.alpha = static_cast<float>(p.alpha);
  e.beta = static_cast<float>(p.beta);
  e.lo = static_cast<float>(p.lo);
  e.hi = static_cast<float>(p.hi);
  if (!has_act || k == Unary::kIdentity) e.act = Act::kNone;
  else if (k == Unary::kRelu) e.act = Act::kRelu;
  else if (k == Unary::kClip) e.act = Act::kClip;
  else if (k == Unary::kHardSigmoid) e.act = Act::kHardSigmoid;
  else if (k == Unary::kHardSwish) e.act = Act::kHardSwish;
  else if (k == Unary::kLeakyRelu) e.act = Act::kLeakyRelu;
  else e.act = Act::kOther;
  return e;
}

bool conv_kernels_avx2() { return use_avx2(); }

void conv_epilogue_rows(const ConvEpilogue& e, float* y, int64_t rows, int64_t cols, int64_t ld,
                        const float* bias, const float* sum) {
  if (e.trivial() && !bias && !sum) return;
  dispatch_act<EpilogueRows>(e.act, e, static_cast<const float*>(y), ld, y, rows, cols, ld, bias, sum);
}

void conv_epilogue_store(const ConvEpilogue& e, const float* src, int64_t lds, float* y,
                         int64_t rows, int64_t cols, int64_t ld, const float* bias,
                         const float* sum) {
  dispatch_act<EpilogueRows>(e.act, e, src, lds, y, rows, cols, ld, bias, sum);
}

int64_t DwGeom::phase_len() const {
  const int64_t max_off = (kw - 1) * dw / sw;
  return ((ow + 7) / 8 * 8 + max_off + 8 + 7) / 8 * 8;  // whole vectors: zeroed by vector stores
}

bool depthwise_plane_supported(const DwGeom& g) {
  return use_avx2() && g.kh <= kMaxTaps && g.kw <= kMaxTaps && g.oh > 0 && g.ow > 0;
}

void depthwise_plane(const DwGeom& g, const float* x, const float* w, float bias, const float* sum,
                     const ConvEpilogue& e, float* y, float* scratch) {
  dispatch_act<DepthwisePlane>(e.act, g, x, w, bias, sum, e, y, scratch);
}

void conv_gemv(const ConvEpilogue& e, const float* a, int64_t rows, int64_t k, const float* x,
               const float* bias, const float* sum, float* y) {
  if (use_avx2()) {
    gemv_avx2(a, rows, k, x, y);
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      float s = 0.f;
      for (int64_t i = 0; i < k; ++i) s += a[r * k + i] * x[i];
      y[r] = s;
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (bias) y[r] += bias[r];
    if (sum) y[r] += sum[r];
  }
  conv_epilogue_rows(e, y, 1, rows, rows, nullptr, nullptr);
}

}  // namespace xpuruntime::cpu
