// See conv_kernels.h. The AVX2 functions carry target attributes (the library is
// built for baseline x86-64) and run only when the CPU reports AVX2 and FMA.
// Activations are written with the same comparisons as elementwise.h's unary_op
// (max/min operand order chosen so NaN and signed zeros come out the same).
#pragma GCC optimize("no-trapping-math")
#include "backends/cpu/ops/conv_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/matmul/cpu_gemm_impl.h"

#define XRT_AVX2 __attribute__((target("avx2,fma")))

namespace xpuruntime::cpu {
namespace {

using Act = ConvEpilogue::Act;

inline float act_scalar(Act a, const ConvEpilogue& e, float x) {
  switch (a) {
    case Act::kRelu: return x > 0.f ? x : 0.f;
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

template <Act A>
void epilogue_rows_portable(const ConvEpilogue& e, float* y, int64_t rows, int64_t cols, int64_t ld,
                            const float* bias, const float* sum) {
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * ld;
    const float b = bias ? bias[r] : 0.f;
    if (sum) {
      const float* sr = sum + r * ld;
      for (int64_t i = 0; i < cols; ++i) yr[i] = act_scalar(A, e, yr[i] + b + sr[i]);
    } else {
      for (int64_t i = 0; i < cols; ++i) yr[i] = act_scalar(A, e, yr[i] + b);
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
    return _mm256_max_ps(x, p.zero);  // x > 0 ? x : 0
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
XRT_AVX2 void epilogue_rows_avx2(const ConvEpilogue& e, float* y, int64_t rows, int64_t cols,
                                 int64_t ld, const float* bias, const float* sum) {
  const VecParams p = vec_params(e);
  const int64_t full = cols / 8 * 8;
  const __m256i mask = tail_mask(cols - full > 0 ? cols - full : 8);
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * ld;
    const float* sr = sum ? sum + r * ld : nullptr;
    const __m256 vb = _mm256_set1_ps(bias ? bias[r] : 0.f);
    for (int64_t i = 0; i < full; i += 8) {
      __m256 v = _mm256_add_ps(_mm256_loadu_ps(yr + i), vb);
      if (sr) v = _mm256_add_ps(v, _mm256_loadu_ps(sr + i));
      _mm256_storeu_ps(yr + i, act_vec<A>(p, v));
    }
    if (full < cols) {
      __m256 v = _mm256_add_ps(_mm256_maskload_ps(yr + full, mask), vb);
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
  const __m256 zero = _mm256_setzero_ps();
  // Padded rows: row pr holds input row pr - ph, or zeros (top/bottom padding), so
  // every tap of every output row reads a row and the kernel tests nothing.
  for (int64_t j = 0; j < g.padded_rows() * g.sw * len; j += 8) _mm256_storeu_ps(buf + j, zero);
  for (int64_t ih = std::max<int64_t>(0, -g.ph); ih < std::min(g.h, g.padded_rows() - g.ph); ++ih) {
    const float* xr = x + ih * g.w;
    float* row = buf + (ih + g.ph) * g.sw * len;
    // Entries j whose source column j·sw + q - pw lies in [0, w), for q = 0.
    if (g.sw == 1) {
      const int64_t j0 = std::min(len, g.pw), n = std::min(g.w, len - j0);
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) _mm256_storeu_ps(row + j0 + i, _mm256_loadu_ps(xr + i));
      if (i < n) {
        const __m256i mask = tail_mask(n - i);
        _mm256_maskstore_ps(row + j0 + i, mask, _mm256_maskload_ps(xr + i, mask));
      }
      continue;
    }
    if (g.sw == 2) {
      // Pairs (2j - pw, 2j + 1 - pw) both inside the row: j in [ja, jb).
      const int64_t ja = std::min(len, (g.pw + 1) / 2);
      const int64_t jb = std::max(ja, std::min(len, (g.w + g.pw - 1) / 2));
      float* p0 = row;
      float* p1 = row + len;
      int64_t j = ja;
      for (; j + 8 <= jb; j += 8) {
        const float* src = xr + 2 * j - g.pw;
        const __m256 a = _mm256_loadu_ps(src), b = _mm256_loadu_ps(src + 8);
        // shuffle picks within 128-bit lanes: a0 a2 b0 b2 | a4 a6 b4 b6; the 64-bit
        // permute restores order.
        const __m256 ev = _mm256_shuffle_ps(a, b, 0x88), od = _mm256_shuffle_ps(a, b, 0xDD);
        _mm256_storeu_ps(p0 + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), 0xD8)));
        _mm256_storeu_ps(p1 + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), 0xD8)));
      }
      // The edges: [0, ja) and [j, end); past `end` both phases read beyond the row.
      const int64_t end = std::min(len, (g.w + g.pw + 1) / 2 + 1);
      for (int64_t q = 0; q < 2; ++q) {
        float* dst = row + q * len;
        for (int64_t i = 0; i < end; ++i) {
          if (i == ja) i = j;  // [ja, j) done by the vector loop
          if (i >= end) break;
          const int64_t iw = 2 * i + q - g.pw;
          if (iw >= 0 && iw < g.w) dst[i] = xr[iw];
        }
      }
      continue;
    }
    for (int64_t q = 0; q < g.sw; ++q) {
      float* dst = row + q * len;
      for (int64_t j = 0; j < len; ++j) {
        const int64_t iw = j * g.sw + q - g.pw;
        if (iw >= 0 && iw < g.w) dst[j] = xr[iw];
      }
    }
  }
}

constexpr int kMaxTaps = 16;  // per kernel dimension; conv.cpp falls back beyond

// V vectors of one output row from column o: accumulate every valid tap, add the
// residual, activate, store (the last vector masked when kMasked).
// R output rows × V vectors from column o: accumulate every tap, add the residual,
// activate, store (the last vector masked when kMasked). Several rows at once
// give narrow planes (7×7, 14×14) independent FMA chains.
template <Act A, int R, int V, bool kMasked>
XRT_AVX2 inline void dw_block(const float* base, int64_t row_step, int64_t kh_step, const float* w,
                              int64_t kh, int64_t kw, const int64_t* coff, int64_t o, __m256 vb,
                              const VecParams& p, __m256i mask, const float* sr, float* yr,
                              int64_t ow) {
  __m256 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = vb;
  for (int64_t i = 0; i < kh; ++i) {
    const float* rb = base + i * kh_step + o;
    const float* wr = w + i * kw;
    for (int64_t j = 0; j < kw; ++j) {
      const __m256 wv = _mm256_broadcast_ss(wr + j);
      const float* src = rb + coff[j];
      for (int r = 0; r < R; ++r)
        for (int v = 0; v < V; ++v)
          acc[r][v] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src + r * row_step + 8 * v), acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) {
      const bool last_masked = kMasked && v == V - 1;
      const int64_t at = r * ow + o + 8 * v;
      __m256 t = acc[r][v];
      if (sr) t = _mm256_add_ps(t, last_masked ? _mm256_maskload_ps(sr + at, mask) : _mm256_loadu_ps(sr + at));
      t = act_vec<A>(p, t);
      if (last_masked) _mm256_maskstore_ps(yr + at, mask, t);
      else _mm256_storeu_ps(yr + at, t);
    }
  }
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
  const int64_t full = g.ow / 8 * 8, rem = g.ow - full;
  const __m256i mask = tail_mask(rem > 0 ? rem : 8);
  const int64_t row_step = g.sh * g.sw * len, kh_step = g.dh * g.sw * len;
  int64_t oh = 0;
  if (g.ow <= 8) {
    for (; oh + 4 <= g.oh; oh += 4) {
      const float* base = buf + oh * row_step;
      const float* sr = sum ? sum + oh * g.ow : nullptr;
      if (rem) dw_block<A, 4, 1, true>(base, row_step, kh_step, w, g.kh, g.kw, coff, 0, vb, p, mask, sr, y + oh * g.ow, g.ow);
      else dw_block<A, 4, 1, false>(base, row_step, kh_step, w, g.kh, g.kw, coff, 0, vb, p, mask, sr, y + oh * g.ow, g.ow);
    }
  }
  for (; oh < g.oh; ++oh) {
    const float* base = buf + oh * row_step;
    float* yr = y + oh * g.ow;
    const float* sr = sum ? sum + oh * g.ow : nullptr;
    int64_t o = 0;
    for (; o + 32 <= full; o += 32)
      dw_block<A, 1, 4, false>(base, row_step, kh_step, w, g.kh, g.kw, coff, o, vb, p, mask, sr, yr, g.ow);
    for (; o + 8 <= full; o += 8)
      dw_block<A, 1, 1, false>(base, row_step, kh_step, w, g.kh, g.kw, coff, o, vb, p, mask, sr, yr, g.ow);
    if (rem) dw_block<A, 1, 1, true>(base, row_step, kh_step, w, g.kh, g.kw, coff, o, vb, p, mask, sr, yr, g.ow);
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
  dispatch_act<EpilogueRows>(e.act, e, y, rows, cols, ld, bias, sum);
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
