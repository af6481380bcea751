// cpu_packed: see cpu_gemm_packed.h. Structure (Goto/BLIS, with B packed ahead
// and A read in place, as MLAS does):
//
//   for each row block of A (all rows, or kRowBlock rows when A is tall)
//     for each K block (kPackedKc)
//       for each column panel of this thread (kPackedNr = 64 columns)
//         for each 6-row tile: 24 zmm accumulators += A tile · panel block
//
// A panel's K block (64 KiB) is reused by every row tile of the block; A's tile
// rows (6 x 1 KiB) stay in L1 across the k loop. One FMA per accumulator and k,
// 4 aligned panel loads and 6 broadcasts per k: 24 FMAs against 10 loads,
// within Zen4's one zmm FMA and two loads a cycle. C is loaded back between K
// blocks (K <= kPackedKc: never). Prefetching the panel ahead measured no gain
// (the hardware prefetcher follows its one sequential stream).
#include "backends/cpu/kernels/matmul/cpu_gemm_packed.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "backends/cpu/kernels/matmul/cpu_gemm_common.h"
#include "backends/cpu/kernels/matmul/cpu_gemm_impl.h"
#include "backends/cpu/kernels/parallel.h"
#include "xpuruntime/error.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define XRT_PACKED_X86 1
#endif

namespace xpuruntime::matmul {
namespace {

// Rows per block when A is tall: 192 rows x 1024 K x 4 bytes = 768 KiB of A
// stay in L2 (1 MiB on Zen4) while every panel of the thread passes over them
// (measured at M 1500: 48 rows 207-210 GFLOP/s, 96: 212, 192: 215-219, 384:
// 211-221).
constexpr int64_t kRowBlock = 192;

using FloatBuffer = std::unique_ptr<float[], PackedB::Free>;

FloatBuffer alloc_floats(int64_t count) {
  const std::size_t bytes =
      (static_cast<std::size_t>(std::max<int64_t>(count, 1)) * sizeof(float) + 63) / 64 * 64;
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  XRT_CHECK(p != nullptr, OutOfMemoryError, "cpu_packed: allocation of ", bytes, " bytes failed");
  return FloatBuffer(p);
}

#ifdef XRT_PACKED_X86

// One tile: R rows (1..6) x 64 columns, kc steps of K. a: the tile's first row
// at the block's first k (row stride lda); b: the panel's block (64 floats per
// k, 64-byte aligned); c: the tile's first element (row stride ldc). mask[j]:
// which of the 16 columns of vector j exist (the last panel of an N not a
// multiple of 64). accumulate: add to C (a later K block); else start from bias
// (or zero).
template <int R>
__attribute__((target("avx512f"))) void tile(int64_t kc, const float* a, int64_t lda,
                                             const float* b, float* c, int64_t ldc,
                                             const float* bias, bool accumulate,
                                             const __mmask16* mask) {
  __m512 acc[R][4];
  if (accumulate) {
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_maskz_loadu_ps(mask[j], c + i * ldc + 16 * j);
  } else {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m512 v = bias ? _mm512_maskz_loadu_ps(mask[j], bias + 16 * j) : _mm512_setzero_ps();
#pragma GCC unroll 6
      for (int i = 0; i < R; ++i) acc[i][j] = v;
    }
  }
  const float* ar[R];
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) ar[i] = a + i * lda;
  for (int64_t k = 0; k < kc; ++k) {
    const float* bk = b + k * kPackedNr;
    const __m512 b0 = _mm512_load_ps(bk), b1 = _mm512_load_ps(bk + 16);
    const __m512 b2 = _mm512_load_ps(bk + 32), b3 = _mm512_load_ps(bk + 48);
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) {
      const __m512 ai = _mm512_set1_ps(ar[i][k]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
      acc[i][2] = _mm512_fmadd_ps(ai, b2, acc[i][2]);
      acc[i][3] = _mm512_fmadd_ps(ai, b3, acc[i][3]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) _mm512_mask_storeu_ps(c + i * ldc + 16 * j, mask[j], acc[i][j]);
}

using TileFn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, const float*,
                        bool, const __mmask16*);
constexpr TileFn kTiles[kPackedMr + 1] = {nullptr,  &tile<1>, &tile<2>, &tile<3>,
                                          &tile<4>, &tile<5>, &tile<6>};

// Relu / GELU on a finished tile (still in L1). Relu keeps NaN, as ONNX Relu.
void activate_tile(Activation act, float* c, int64_t ldc, int64_t rows, int64_t cols) {
  if (act == Activation::kNone) return;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) c[i * ldc + j] = activate(c[i * ldc + j], act);
}

// The product of rows [r0, r1) and panels [p0, p1) of one batch.
void run_block(const float* a, int64_t lda, const PackedB& pb, float* c, int64_t ldc,
               const float* bias, Activation act, bool accumulate, int64_t r0, int64_t r1,
               int64_t p0, int64_t p1) {
  const int64_t k = pb.k(), n = pb.n();
  // K in equal blocks of at most kPackedKc (K 1536: two of 768, not 1024 +
  // 512).
  const int64_t kb = (k + kPackedKc - 1) / kPackedKc, kc_max = (k + kb - 1) / kb;
  for (int64_t m0 = r0; m0 < r1; m0 += kRowBlock) {
    const int64_t m1 = std::min(r1, m0 + kRowBlock);
    for (int64_t k0 = 0; k0 < k; k0 += kc_max) {
      const int64_t kc = std::min(kc_max, k - k0);
      const bool last = k0 + kc == k;
      for (int64_t pj = p0; pj < p1; ++pj) {
        const int64_t col = pj * kPackedNr, cols = std::min(kPackedNr, n - col);
        __mmask16 mask[4];
        for (int j = 0; j < 4; ++j) {
          const int64_t live = std::clamp<int64_t>(cols - 16 * j, 0, 16);
          mask[j] = static_cast<__mmask16>((1u << live) - 1u);
        }
        const float* bp = pb.panel(pj) + k0 * kPackedNr;
        const float* bias_p = bias ? bias + col : nullptr;
        for (int64_t i0 = m0, rows = 0; i0 < m1; i0 += rows) {
          // 1-3 rows left after the last full tile: the last 7-9 rows run as two tiles of
          // 4-5 instead (a 1-2 row tile reads the panel block at 3-6x the bytes per FMA of
          // a full one, more than L2 feeds).
          const int64_t left = m1 - i0;
          rows =
              left > kPackedMr && left < kPackedMr + 4 ? (left + 1) / 2 : std::min(kPackedMr, left);
          float* ct = c + i0 * ldc + col;
          kTiles[rows](kc, a + i0 * lda + k0, lda, bp, ct, ldc, bias_p, accumulate || k0 > 0,
                       mask);
          if (last) activate_tile(act, ct, ldc, rows, cols);
        }
      }
    }
  }
}

#endif  // XRT_PACKED_X86

}  // namespace

void PackedB::Free::operator()(float* p) const noexcept { std::free(p); }

bool cpu_gemm_packed_available() {
#ifdef XRT_PACKED_X86
  return cpu_has_avx512f();
#else
  return false;
#endif
}

GemmRejection cpu_gemm_packed_rejection(const GemmProblem& p) {
  using Kind = GemmRejection::Kind;
  if (!cpu_gemm_packed_available())
    return {Kind::kShape,
            "cpu_packed: this CPU (or OS) lacks AVX-512F; "
            "cpu_blocked runs AVX2 and portable code"};
  if (p.dtype != DType::kFloat32)
    return {Kind::kDtype, "cpu_packed runs float32 only, not " + std::string(dtype_name(p.dtype)) +
                              " (cpu_blocked and cpu_blas run float64, float16 and bfloat16)"};
  if (GemmRejection r = row_sums_rejection(p, "cpu_packed")) return r;
  if (p.n > 1 && p.c_cs != 1)
    return {Kind::kLayout,
            "cpu_packed writes C rows with vector stores: C's "
            "columns must be contiguous "
            "(column stride 1, got " +
                std::to_string(p.c_cs) + "); cpu_blocked takes any strides"};
  return {};
}

std::shared_ptr<const PackedB> PackedB::pack(const MatrixRef& b, int64_t k, int64_t n) {
  XRT_CHECK(k >= 1 && n >= 1 && b.data != nullptr, InvalidArgumentError,
            "cpu_packed: cannot pack a ", k, "x", n, " operand", b.data ? "" : " without data",
            "; K and N must be at least 1");
  XRT_CHECK(cpu_gemm_packed_available(), BackendUnavailableError,
            "cpu_packed needs AVX-512F, which this CPU (or OS) lacks; use "
            "cpu_blocked or onednn");
  const int64_t panels = (n + kPackedNr - 1) / kPackedNr;
  FloatBuffer buf = alloc_floats(panels * k * kPackedNr);
  const float* src = static_cast<const float*>(b.data);
  float* dst = buf.get();
  // Panel-major, then k, then the panel's 64 columns; columns past N are zero
  // so the micro-kernel never branches on them (their results are masked off).
  for (int64_t pj = 0; pj < panels; ++pj) {
    const int64_t col = pj * kPackedNr, cols = std::min(kPackedNr, n - col);
    for (int64_t kk = 0; kk < k; ++kk) {
      float* row = dst + (pj * k + kk) * kPackedNr;
      const float* s = src + kk * b.rs + col * b.cs;
      if (b.cs == 1)
        std::memcpy(row, s, static_cast<std::size_t>(cols) * sizeof(float));
      else
        for (int64_t j = 0; j < cols; ++j) row[j] = s[j * b.cs];
      std::fill(row + cols, row + kPackedNr, 0.f);
    }
  }
  return std::make_shared<const PackedB>(std::move(buf), b, k, n);
}

std::shared_ptr<const PackedB> PackedB::pack_shared(const MatrixRef& b, int64_t k, int64_t n) {
  using Key = std::array<int64_t, 5>;
  static std::mutex mu;
  static std::map<Key, std::weak_ptr<const PackedB>> cache;
  const Key key{static_cast<int64_t>(reinterpret_cast<std::uintptr_t>(b.data)), b.rs, b.cs, k, n};
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) {
    if (std::shared_ptr<const PackedB> hit = it->second.lock()) return hit;
  }
  std::erase_if(cache, [](const auto& e) { return e.second.expired(); });
  std::shared_ptr<const PackedB> packed = pack(b, k, n);
  cache[key] = packed;
  return packed;
}

bool PackedB::serves(const GemmProblem& p) const {
  return p.dtype == DType::kFloat32 && p.b.data == src_.data && p.k == k_ && p.n == n_ &&
         (p.batch <= 1 || p.b.bs == 0) && (k_ == 1 || p.b.rs == src_.rs) &&
         (n_ == 1 || p.b.cs == src_.cs);
}

void cpu_gemm_packed_run(const GemmProblem& p, const PackedB& packed, bool accumulate) {
  if (GemmRejection r = cpu_gemm_packed_rejection(p)) XRT_THROW(InvalidArgumentError, r.detail);
  XRT_CHECK(p.k == packed.k() && p.n == packed.n(), InvalidArgumentError,
            "cpu_packed: the problem is ", p.m, "x", p.k, "x", p.n, " but B was packed as ",
            packed.k(), "x", packed.n());
  if (p.batch <= 0 || p.m <= 0 || p.n <= 0) return;
#ifdef XRT_PACKED_X86
  // A read in place needs contiguous rows; otherwise (a Gemm's transA) a
  // row-major copy.
  FloatBuffer a_copy;
  const float* a = static_cast<const float*>(p.a.data);
  int64_t lda = p.a.rs, a_bs = p.a.bs;
  if (p.a.cs != 1 && p.k > 1) {
    a_copy = alloc_floats(p.batch * p.m * p.k);
    for (int64_t bi = 0; bi < p.batch; ++bi)
      for (int64_t i = 0; i < p.m; ++i)
        for (int64_t kk = 0; kk < p.k; ++kk)
          a_copy[(bi * p.m + i) * p.k + kk] = a[bi * p.a.bs + i * p.a.rs + kk * p.a.cs];
    a = a_copy.get();
    lda = p.k;
    a_bs = p.m * p.k;
  }
  float* c = static_cast<float*>(p.c);
  const float* bias = static_cast<const float*>(p.bias);
  // Batches whose rows follow each other in A and C are one taller problem.
  int64_t batches = p.batch, m = p.m;
  if (p.batch > 1 && a_bs == p.m * lda && p.c_bs == p.m * p.c_rs) {
    m = p.batch * p.m;
    batches = 1;
  }
  const int64_t panels = packed.panels();
  const int threads = cpu::parallel_threads();
  // Few rows: threads take column panels (each reads all of A, which is small).
  // Tall A: threads take row blocks (each streams all of B, from L3).
  const bool by_rows = threads > 1 && (m >= 512 || panels < 2 * threads) && m >= 2 * kPackedMr;
  const int64_t units = by_rows ? (m + kPackedMr * 4 - 1) / (kPackedMr * 4) : panels;
  for (int64_t bi = 0; bi < batches; ++bi) {
    const float* ab = a + bi * a_bs;
    float* cb = c + bi * p.c_bs;
    // One equal part per thread (measured: 12 panels in the pool's 8 uneven
    // chunks ran 10-15% slower, one thread finishing a 2-panel chunk while the
    // other waited).
    const int64_t parts = std::min<int64_t>(units, threads);
    cpu::parallel_for(parts, 2 * m * p.n * p.k, [&](int64_t q0, int64_t q1) {
      const int64_t u0 = units * q0 / parts, u1 = units * q1 / parts;
      if (by_rows)
        run_block(ab, lda, packed, cb, p.c_rs, bias, p.activation, accumulate, u0 * kPackedMr * 4,
                  std::min(m, u1 * kPackedMr * 4), 0, panels);
      else
        run_block(ab, lda, packed, cb, p.c_rs, bias, p.activation, accumulate, 0, m, u0, u1);
    });
  }
#else
  XRT_THROW(BackendUnavailableError, "cpu_packed needs an x86-64 CPU with AVX-512F");
#endif
}

void cpu_gemm_packed(const GemmProblem& p) {
  if (GemmRejection r = cpu_gemm_packed_rejection(p)) XRT_THROW(InvalidArgumentError, r.detail);
  if (p.batch <= 0 || p.m <= 0 || p.n <= 0) return;
  if (p.k == 0) {
    // Nothing to multiply: C is the bias (or zero), activated.
    float* c = static_cast<float*>(p.c);
    const float* bias = static_cast<const float*>(p.bias);
    for (int64_t bi = 0; bi < p.batch; ++bi)
      for (int64_t i = 0; i < p.m; ++i)
        for (int64_t j = 0; j < p.n; ++j)
          c[bi * p.c_bs + i * p.c_rs + j] = activate(bias ? bias[j] : 0.f, p.activation);
    return;
  }
  if (p.batch <= 1 || p.b.bs == 0) {
    cpu_gemm_packed_run(p, *PackedB::pack(p.b, p.k, p.n));
    return;
  }
  // A different B per batch: pack and run each batch on its own.
  const int64_t es = static_cast<int64_t>(sizeof(float));
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    GemmProblem q = p;
    q.batch = 1;
    q.a.data = static_cast<const char*>(p.a.data) + bi * p.a.bs * es;
    q.b.data = static_cast<const char*>(p.b.data) + bi * p.b.bs * es;
    q.c = static_cast<char*>(p.c) + bi * p.c_bs * es;
    cpu_gemm_packed_run(q, *PackedB::pack(q.b, q.k, q.n));
  }
}

}  // namespace xpuruntime::matmul
