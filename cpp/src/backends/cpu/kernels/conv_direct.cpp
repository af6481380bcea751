// See conv_direct.h. The AVX2 functions carry target attributes (the library is
// built for baseline x86-64) and run only when the CPU reports AVX2 and FMA.
#pragma GCC optimize("no-trapping-math")
#include "backends/cpu/kernels/conv_direct.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/kernels/matmul/cpu_gemm_impl.h"
#include "backends/cpu/kernels/gemm_call.h"
#include "backends/cpu/kernels/parallel.h"

#define XRT_AVX2 __attribute__((target("avx2,fma")))

namespace xpuruntime::cpu {
namespace {

constexpr int kMR = 6;    // output channels per register tile
constexpr int kNR = 16;   // output positions per register tile (two vectors)
// Taps per K chunk: the tile's weight panel (6 × 256 floats, 6 KiB) stays in L1
// while the task's column tiles reuse it; partial sums go through the task's
// accumulator buffer between chunks.
constexpr int64_t kKChunk = 256;
// A task's accumulator block: up to 96 output channels × 128 positions (48 KiB).
constexpr int64_t kTaskRows = 96;
constexpr int64_t kTaskTiles = 8;
// Enough tasks that both threads of a loaded pool stay busy to the end.
constexpr int64_t kMinTasks = 16;
// Up to this many positions past the last whole tile (a 7×7 plane's 49th, a
// 14×14 plane's last 4) go through dot products along K instead: a tile for them
// would compute 8 lanes for one or a few useful ones.
constexpr int64_t kNarrowCols = 6;
constexpr int64_t kNarrowRows = 64;  // output channels per narrow task

// Where each tap reads: the (virtual) padded, stride-phase-split input. Row phase
// rp (< sh) of padded row r = i·sh + rp is plane row i; likewise columns. Only
// the phases some tap reads are stored.
struct Layout {
  int64_t hq = 0, wq = 0;  // phase plane
  int64_t nq = 0;          // output positions at pitch wq (oh · wq)
  int64_t nmain = 0;       // the first nmain go through register tiles, the rest narrow
  int64_t cstride = 0;     // floats per input channel
  int64_t floats = 0;      // buffer size (with zeroed slack for the last tile)
  bool copy = false;       // false: the input itself is the buffer
  std::vector<int64_t> row_phases, col_phases;  // used phases, in index order
  std::vector<int32_t> off;                     // per tap k = (c·kh + i)·kw + j
};

int64_t index_of(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) - v.begin();
}

Layout make_layout(const DirectConvGeom& g) {
  Layout l;
  l.hq = g.oh + (g.kh - 1) * g.dh / g.sh;
  l.wq = g.ow + (g.kw - 1) * g.dw / g.sw;
  l.nq = g.oh * l.wq;
  l.nmain = l.nq > kNR && l.nq % kNR <= kNarrowCols ? l.nq / kNR * kNR : l.nq;
  // The input itself serves when it already is that buffer and no tap reads past
  // its end: with kw > 1 the pitch's dropped columns of the last row would.
  l.copy = !(g.sh == 1 && g.sw == 1 && g.pt == 0 && g.pl == 0 && l.hq == g.h && l.wq == g.w &&
             (g.kw - 1) * g.dw == 0);
  for (int64_t i = 0; i < g.kh; ++i)
    if (index_of(l.row_phases, i * g.dh % g.sh) == static_cast<int64_t>(l.row_phases.size()))
      l.row_phases.push_back(i * g.dh % g.sh);
  for (int64_t j = 0; j < g.kw; ++j)
    if (index_of(l.col_phases, j * g.dw % g.sw) == static_cast<int64_t>(l.col_phases.size()))
      l.col_phases.push_back(j * g.dw % g.sw);
  const int64_t plane = l.hq * l.wq;
  const int64_t nph = static_cast<int64_t>(l.row_phases.size() * l.col_phases.size());
  l.cstride = l.copy ? nph * plane : g.h * g.w;
  // The last tile reads at most wq + kNR past the last channel (see conv_direct).
  l.floats = l.copy ? g.c * l.cstride + l.wq + 2 * kNR : 0;
  l.off.resize(static_cast<std::size_t>(g.c * g.kh * g.kw));
  std::size_t k = 0;
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t ph = index_of(l.row_phases, i * g.dh % g.sh) * static_cast<int64_t>(l.col_phases.size()) +
                           index_of(l.col_phases, j * g.dw % g.sw);
        l.off[k++] = static_cast<int32_t>(c * l.cstride + ph * plane + i * g.dh / g.sh * l.wq + j * g.dw / g.sw);
      }
  return l;
}

// Channel c of x into the buffer: every used phase plane, zeros where the padded
// input is padding.
void fill_channel(const DirectConvGeom& g, const Layout& l, const float* x, int64_t c, float* buf) {
  const float* xc = x + c * g.h * g.w;
  float* dst = buf + c * l.cstride;
  for (int64_t rp : l.row_phases) {
    for (int64_t cp : l.col_phases) {
      for (int64_t i = 0; i < l.hq; ++i, dst += l.wq) {
        const int64_t ih = i * g.sh + rp - g.pt;
        if (ih < 0 || ih >= g.h) {
          std::fill(dst, dst + l.wq, 0.f);
          continue;
        }
        const float* xr = xc + ih * g.w;
        // Columns j with input column j·sw + cp - pl inside the row: [lo, hi).
        const int64_t first = cp - g.pl;
        const int64_t lo = std::min(l.wq, first >= 0 ? 0 : (-first + g.sw - 1) / g.sw);
        const int64_t hi = std::clamp<int64_t>(g.w - 1 - first < 0 ? 0 : (g.w - 1 - first) / g.sw + 1, lo, l.wq);
        std::fill(dst, dst + lo, 0.f);
        if (g.sw == 1) std::memcpy(dst + lo, xr + lo + first, static_cast<std::size_t>(hi - lo) * 4);
        else
          for (int64_t j = lo; j < hi; ++j) dst[j] = xr[j * g.sw + first];
        std::fill(dst + hi, dst + l.wq, 0.f);
      }
    }
  }
}

alignas(32) const int32_t kMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

XRT_AVX2 inline __m256i lanes(int64_t n) {  // the first clamp(n, 0, 8) lanes
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskTable + 8 - std::clamp<int64_t>(n, 0, 8)));
}

// The register tile: c[i, 0:8·NV] (+)= sum_k w[i·ldw + k] · x[off[k] + 0:8·NV] for
// i < MR. kMask: only the first nvalid positions are read (the buffer may end
// there); the rest compute as zero. Accumulators are named variables, not an
// array: GCC keeps an array's copy in memory and stores it every iteration.
template <int MR, int NV, bool kMask>
XRT_AVX2 void tile(int64_t kc, const float* w, int64_t ldw, const float* x, const int32_t* off,
                   float* c, int64_t ldc, bool first, int64_t nvalid) {
  const __m256 z = _mm256_setzero_ps();
  __m256 c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z;
  __m256 c30 = z, c31 = z, c40 = z, c41 = z, c50 = z, c51 = z;
#define XRT_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define XRT_LOAD(i)                                                  \
  if constexpr (MR > i) {                                            \
    if (!first) {                                                    \
      c##i##0 = _mm256_loadu_ps(c + i * ldc);                        \
      if constexpr (NV > 1) c##i##1 = _mm256_loadu_ps(c + i * ldc + 8); \
    }                                                                \
  }
  XRT_ROWS(XRT_LOAD)
  const float* w0 = w;
  const float* w1 = w + (MR > 1 ? ldw : 0);
  const float* w2 = w + (MR > 2 ? 2 * ldw : 0);
  const float* w3 = w + (MR > 3 ? 3 * ldw : 0);
  const float* w4 = w + (MR > 4 ? 4 * ldw : 0);
  const float* w5 = w + (MR > 5 ? 5 * ldw : 0);
  const __m256i m0 = lanes(nvalid), m1 = lanes(nvalid - 8);
  for (int64_t k = 0; k < kc; ++k) {
    const float* xp = x + off[k];
    const __m256 b0 = kMask ? _mm256_maskload_ps(xp, m0) : _mm256_loadu_ps(xp);
    const __m256 b1 = NV < 2 ? z : (kMask ? _mm256_maskload_ps(xp + 8, m1) : _mm256_loadu_ps(xp + 8));
#define XRT_FMA(i)                                     \
  if constexpr (MR > i) {                              \
    const __m256 a = _mm256_broadcast_ss(w##i + k);    \
    c##i##0 = _mm256_fmadd_ps(a, b0, c##i##0);         \
    if constexpr (NV > 1) c##i##1 = _mm256_fmadd_ps(a, b1, c##i##1); \
  }
    XRT_ROWS(XRT_FMA)
  }
#define XRT_STORE(i)                                                  \
  if constexpr (MR > i) {                                             \
    _mm256_storeu_ps(c + i * ldc, c##i##0);                           \
    if constexpr (NV > 1) _mm256_storeu_ps(c + i * ldc + 8, c##i##1); \
  }
  XRT_ROWS(XRT_STORE)
#undef XRT_STORE
#undef XRT_FMA
#undef XRT_LOAD
#undef XRT_ROWS
}

using TileFn = void (*)(int64_t, const float*, int64_t, const float*, const int32_t*, float*,
                        int64_t, bool, int64_t);

template <int MR>
constexpr std::array<TileFn, 4> tiles_of() {
  return {&tile<MR, 1, false>, &tile<MR, 1, true>, &tile<MR, 2, false>, &tile<MR, 2, true>};
}
constexpr std::array<std::array<TileFn, 4>, kMR> kTiles = {tiles_of<1>(), tiles_of<2>(), tiles_of<3>(),
                                                           tiles_of<4>(), tiles_of<5>(), tiles_of<6>()};

// Shape-only task grid: rows × column tiles per task.
struct Grid {
  int64_t rows, tiles, mtasks, ntasks;
};

Grid make_grid(const DirectConvGeom& g, const Layout& l) {
  const int64_t ntiles = (l.nmain + kNR - 1) / kNR;
  Grid gr{std::min(g.m, kTaskRows), std::min(ntiles, kTaskTiles), 0, 0};
  auto count = [&] {
    gr.mtasks = (g.m + gr.rows - 1) / gr.rows;
    gr.ntasks = (ntiles + gr.tiles - 1) / gr.tiles;
    return gr.mtasks * gr.ntasks;
  };
  // Split rows first (each task then reads fewer weights), down to 4 tiles tall,
  // then columns.
  while (count() < kMinTasks && gr.rows > 2 * kMR) gr.rows = (gr.rows / 2 + kMR - 1) / kMR * kMR;
  while (count() < kMinTasks && gr.tiles > 1) gr.tiles = (gr.tiles + 1) / 2;
  return gr;
}

// Output channels [r0, r0 + kNarrowRows) at the positions past l.nmain: per
// position, its input column (every tap) gathered once, then one dot product per
// channel along K with the epilogue (conv_gemv). work: kdim + 2·kNarrowRows floats.
void narrow_columns(const DirectConvGeom& g, const Layout& l, const float* buf, const float* w,
                    const float* bias, const float* sum, const ConvEpilogue& e, float* y, int64_t r0,
                    float* work) {
  const int64_t kdim = g.c * g.kh * g.kw, plane = g.oh * g.ow;
  const int64_t rows = std::min(kNarrowRows, g.m - r0);
  float* col = work;
  float* sc = work + kdim;
  float* res = sc + kNarrowRows;
  for (int64_t j = l.nmain; j < l.nq; ++j) {
    if (j % l.wq >= g.ow) continue;  // a pitch column past the row's end
    const int64_t at = j / l.wq * g.ow + j % l.wq;
    for (int64_t k = 0; k < kdim; ++k) col[k] = buf[l.off[static_cast<std::size_t>(k)] + j];
    if (sum)
      for (int64_t r = 0; r < rows; ++r) sc[r] = sum[(r0 + r) * plane + at];
    conv_gemv(e, w + r0 * kdim, rows, kdim, col, bias ? bias + r0 : nullptr, sum ? sc : nullptr, res);
    for (int64_t r = 0; r < rows; ++r) y[(r0 + r) * plane + at] = res[r];
  }
}

}  // namespace

bool conv_direct_supported(const DirectConvGeom& g) {
  if (!matmul::cpu_has_avx2_fma() || g.c <= 0 || g.m <= 0 || g.oh <= 0 || g.ow <= 0) return false;
  // int32 tap offsets.
  const int64_t hq = g.oh + (g.kh - 1) * g.dh / g.sh, wq = g.ow + (g.kw - 1) * g.dw / g.sw;
  const int64_t per_channel = std::max(g.sh * g.sw * hq * wq, g.h * g.w);
  return g.c * per_channel + wq + 4 * kNR < std::numeric_limits<int32_t>::max();
}

void conv_direct(const DirectConvGeom& g, const float* x, const float* w, const float* bias,
                 const float* sum, const ConvEpilogue& e, float* y) {
  const Layout l = make_layout(g);
  const int64_t kdim = g.c * g.kh * g.kw;
  const float* buf = x;
  if (l.copy) {
    float* b = static_cast<float*>(thread_scratch(static_cast<std::size_t>(l.floats) * 4, 1));
    std::fill(b + g.c * l.cstride, b + l.floats, 0.f);
    parallel_for(g.c, g.c * l.cstride, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) fill_channel(g, l, x, c, b);
    });
    buf = b;
  }
  const Grid gr = make_grid(g, l);
  // K chunks of whole channels (a chunk never splits a channel's taps), fixed by
  // the shape: the summation order of every output is the same on any thread.
  const int64_t taps = g.kh * g.kw;
  const int64_t kc_max = std::max<int64_t>(1, kKChunk / taps) * taps;
  const int64_t plane = g.oh * g.ow;
  const int64_t ldc = gr.tiles * kNR;
  const int64_t grid_tasks = gr.mtasks * gr.ntasks;
  const int64_t narrow_tasks = l.nmain < l.nq ? (g.m + kNarrowRows - 1) / kNarrowRows : 0;
  // Per thread: the tiles' accumulators, or a narrow task's input column, residual
  // column and results.
  const int64_t scratch = std::max(gr.rows * ldc, kdim + 2 * kNarrowRows);
  parallel_for(grid_tasks + narrow_tasks, g.m * l.nq * kdim, [&](int64_t t0, int64_t t1) {
    float* acc = static_cast<float*>(thread_scratch(static_cast<std::size_t>(scratch) * 4, 0));
    for (int64_t t = t0; t < t1; ++t) {
      if (t >= grid_tasks) {
        narrow_columns(g, l, buf, w, bias, sum, e, y, (t - grid_tasks) * kNarrowRows, acc);
        continue;
      }
      const int64_t r0 = t / gr.ntasks * gr.rows, r1 = std::min(g.m, r0 + gr.rows);
      const int64_t j0 = t % gr.ntasks * gr.tiles * kNR, j1 = std::min(l.nmain, j0 + gr.tiles * kNR);
      for (int64_t k0 = 0; k0 < kdim; k0 += kc_max) {
        const int64_t kc = std::min(kc_max, kdim - k0);
        // Column tiles outer: a tile's input taps (scattered over rows and
        // channels) stay in L1 while the weight rows, plain streams, come from L2.
        for (int64_t j = j0; j < j1; j += kNR) {
          const int64_t nvalid = j1 - j;
          // Past the end of the input only the last tile of a borrowed input
          // could read; the copy has slack.
          const int variant = (nvalid > 8 ? 2 : 0) + (!l.copy && j + kNR > l.nq ? 1 : 0);
          for (int64_t r = r0; r < r1; r += kMR) {
            kTiles[std::min<int64_t>(kMR, r1 - r) - 1][variant](
                kc, w + r * kdim + k0, kdim, buf + j, l.off.data() + k0, acc + (r - r0) * ldc + (j - j0),
                ldc, k0 == 0, nvalid);
          }
        }
      }
      // Store the valid positions (ow < OW of each row at pitch wq) with the epilogue.
      for (int64_t oh = j0 / l.wq; oh * l.wq < j1; ++oh) {
        const int64_t s0 = std::max(j0, oh * l.wq), s1 = std::min(j1, oh * l.wq + g.ow);
        if (s0 >= s1) continue;
        const int64_t at = oh * g.ow + (s0 - oh * l.wq);
        conv_epilogue_store(e, acc + (s0 - j0), ldc, y + r0 * plane + at, r1 - r0, s1 - s0, plane,
                            bias ? bias + r0 : nullptr, sum ? sum + r0 * plane + at : nullptr);
      }
    }
  });
}

}  // namespace xpuruntime::cpu
