// cpu_blocked: our own GEMM (see cpu_gemm_impl.h for the contract).
//
// Structure (Goto/BLIS): for every (batch, MC-row block, NC-column block) tile a
// thread packs KC×NC of B into NR-wide micro-panels and MC×KC of A into MR-tall
// micro-panels, converting to the compute type on the way (that is where fp16 and
// bf16 become fp32 blocks), then runs the MR×NR micro-kernel over the tile. The
// micro-kernel keeps its MR×NR accumulators in registers for the whole KC loop.
// Tiles are independent, so OpenMP splits them statically with no synchronization;
// each thread owns its packing buffers (allocated before the parallel region, so
// nothing inside it can throw).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define XRT_GEMM_X86 1
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include "backends/cpu/kernels/matmul/cpu_gemm_common.h"
#include "backends/cpu/kernels/matmul/cpu_gemm_impl.h"
#include "backends/cpu/kernels/contention.h"
#include "backends/cpu/kernels/parallel.h"

namespace xpuruntime::matmul {
namespace {

// Register tile MR×NR fills 12 of the 16 AVX2 registers with accumulators; MC×KC of
// A (~96 KiB) stays in L2 and a KC×NR micro-panel of B (16 KiB) in L1.
template <typename T>
struct Tiling;
template <>
struct Tiling<float> {
  static constexpr int MR = 6, NR = 16, MC = 96, KC = 256, NC = 256;
};
template <>
struct Tiling<double> {
  static constexpr int MR = 6, NR = 8, MC = 96, KC = 128, NC = 256;
};

// AVX-512 has 32 registers of twice the width: an 8×32 fp32 tile (8×16 fp64) keeps 16
// accumulators, two B vectors and a broadcast in registers, twice the work per loaded
// B element of the AVX2 tile; KC shrinks so a KC×NR micro-panel of B still fits L1.
template <typename T>
struct Tiling512;
template <>
struct Tiling512<float> {
  static constexpr int MR = 8, NR = 32, MC = 96, KC = 192, NC = 256;
};
template <>
struct Tiling512<double> {
  static constexpr int MR = 8, NR = 16, MC = 96, KC = 128, NC = 256;
};

template <typename T>
using MicroKernel = void (*)(int64_t kc, const T* a, const T* b, T* acc);

// ---- micro-kernels ----------------------------------------------------------

// Portable: GCC/Clang vector extensions of 128 bits (SSE2 on any x86-64, NEON on
// Arm), no ISA check needed. 128-bit machines have 16 vector registers, too few for
// the whole MR×NR tile, so the tile is computed in column strips of two vectors:
// 2·MR accumulators stay in registers and the A micro-panel is re-read from L1.
template <typename T, int MR, int NR>
void micro_kernel_portable(int64_t kc, const T* __restrict a, const T* __restrict b,
                           T* __restrict acc) {
  typedef T V __attribute__((vector_size(16)));
  constexpr int kLanes = 16 / sizeof(T);
  constexpr int kStrip = 2 * kLanes;
  static_assert(NR % kStrip == 0, "NR must be a multiple of two 128-bit vectors");
  for (int j0 = 0; j0 < NR; j0 += kStrip) {
    V c0[MR], c1[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) c0[i] = c1[i] = V{};
    const T* ap = a;
    const T* bp = b + j0;
    for (int64_t p = 0; p < kc; ++p) {
      V b0, b1;
      std::memcpy(&b0, bp, sizeof(V));
      std::memcpy(&b1, bp + kLanes, sizeof(V));
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        V ai;
        for (int l = 0; l < kLanes; ++l) ai[l] = ap[i];  // broadcast
        c0[i] += ai * b0;
        c1[i] += ai * b1;
      }
      ap += MR;
      bp += NR;
    }
    for (int i = 0; i < MR; ++i) {
      std::memcpy(acc + i * NR + j0, &c0[i], sizeof(V));
      std::memcpy(acc + i * NR + j0 + kLanes, &c1[i], sizeof(V));
    }
  }
}

#ifdef XRT_GEMM_X86
// 6×16 fp32: two 8-wide B vectors per k, one broadcast of A per row, 12 FMAs.
__attribute__((target("avx2,fma"))) void micro_kernel_avx2_f32(int64_t kc, const float* a,
                                                               const float* b, float* acc) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = _mm256_loadu_ps(b + 8);
    __m256 ai = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(ai, b0, c00);
    c01 = _mm256_fmadd_ps(ai, b1, c01);
    ai = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(ai, b0, c10);
    c11 = _mm256_fmadd_ps(ai, b1, c11);
    ai = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(ai, b0, c20);
    c21 = _mm256_fmadd_ps(ai, b1, c21);
    ai = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(ai, b0, c30);
    c31 = _mm256_fmadd_ps(ai, b1, c31);
    ai = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(ai, b0, c40);
    c41 = _mm256_fmadd_ps(ai, b1, c41);
    ai = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(ai, b0, c50);
    c51 = _mm256_fmadd_ps(ai, b1, c51);
    a += 6;
    b += 16;
  }
  _mm256_storeu_ps(acc + 0, c00);
  _mm256_storeu_ps(acc + 8, c01);
  _mm256_storeu_ps(acc + 16, c10);
  _mm256_storeu_ps(acc + 24, c11);
  _mm256_storeu_ps(acc + 32, c20);
  _mm256_storeu_ps(acc + 40, c21);
  _mm256_storeu_ps(acc + 48, c30);
  _mm256_storeu_ps(acc + 56, c31);
  _mm256_storeu_ps(acc + 64, c40);
  _mm256_storeu_ps(acc + 72, c41);
  _mm256_storeu_ps(acc + 80, c50);
  _mm256_storeu_ps(acc + 88, c51);
}

// 6×8 fp64: the same shape of loop with 4-wide double vectors.
__attribute__((target("avx2,fma"))) void micro_kernel_avx2_f64(int64_t kc, const double* a,
                                                               const double* b, double* acc) {
  __m256d c00 = _mm256_setzero_pd(), c01 = _mm256_setzero_pd();
  __m256d c10 = _mm256_setzero_pd(), c11 = _mm256_setzero_pd();
  __m256d c20 = _mm256_setzero_pd(), c21 = _mm256_setzero_pd();
  __m256d c30 = _mm256_setzero_pd(), c31 = _mm256_setzero_pd();
  __m256d c40 = _mm256_setzero_pd(), c41 = _mm256_setzero_pd();
  __m256d c50 = _mm256_setzero_pd(), c51 = _mm256_setzero_pd();
  for (int64_t p = 0; p < kc; ++p) {
    const __m256d b0 = _mm256_loadu_pd(b);
    const __m256d b1 = _mm256_loadu_pd(b + 4);
    __m256d ai = _mm256_broadcast_sd(a + 0);
    c00 = _mm256_fmadd_pd(ai, b0, c00);
    c01 = _mm256_fmadd_pd(ai, b1, c01);
    ai = _mm256_broadcast_sd(a + 1);
    c10 = _mm256_fmadd_pd(ai, b0, c10);
    c11 = _mm256_fmadd_pd(ai, b1, c11);
    ai = _mm256_broadcast_sd(a + 2);
    c20 = _mm256_fmadd_pd(ai, b0, c20);
    c21 = _mm256_fmadd_pd(ai, b1, c21);
    ai = _mm256_broadcast_sd(a + 3);
    c30 = _mm256_fmadd_pd(ai, b0, c30);
    c31 = _mm256_fmadd_pd(ai, b1, c31);
    ai = _mm256_broadcast_sd(a + 4);
    c40 = _mm256_fmadd_pd(ai, b0, c40);
    c41 = _mm256_fmadd_pd(ai, b1, c41);
    ai = _mm256_broadcast_sd(a + 5);
    c50 = _mm256_fmadd_pd(ai, b0, c50);
    c51 = _mm256_fmadd_pd(ai, b1, c51);
    a += 6;
    b += 8;
  }
  _mm256_storeu_pd(acc + 0, c00);
  _mm256_storeu_pd(acc + 4, c01);
  _mm256_storeu_pd(acc + 8, c10);
  _mm256_storeu_pd(acc + 12, c11);
  _mm256_storeu_pd(acc + 16, c20);
  _mm256_storeu_pd(acc + 20, c21);
  _mm256_storeu_pd(acc + 24, c30);
  _mm256_storeu_pd(acc + 28, c31);
  _mm256_storeu_pd(acc + 32, c40);
  _mm256_storeu_pd(acc + 36, c41);
  _mm256_storeu_pd(acc + 40, c50);
  _mm256_storeu_pd(acc + 44, c51);
}

// 8×32 fp32 / 8×16 fp64 (Tiling512): two B vectors per k, one broadcast of A per
// row, 16 FMAs; the fully unrolled accumulator arrays live in zmm registers.
__attribute__((target("avx512f"))) void micro_kernel_avx512_f32(int64_t kc, const float* a,
                                                                const float* b, float* acc) {
  constexpr int MR = Tiling512<float>::MR;
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_loadu_ps(b);
    const __m512 b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
      c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
    }
    a += MR;
    b += 32;
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    _mm512_storeu_ps(acc + i * 32, c0[i]);
    _mm512_storeu_ps(acc + i * 32 + 16, c1[i]);
  }
}

__attribute__((target("avx512f"))) void micro_kernel_avx512_f64(int64_t kc, const double* a,
                                                                const double* b, double* acc) {
  constexpr int MR = Tiling512<double>::MR;
  __m512d c0[MR], c1[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm512_setzero_pd();
  for (int64_t p = 0; p < kc; ++p) {
    const __m512d b0 = _mm512_loadu_pd(b);
    const __m512d b1 = _mm512_loadu_pd(b + 8);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512d ai = _mm512_set1_pd(a[i]);
      c0[i] = _mm512_fmadd_pd(ai, b0, c0[i]);
      c1[i] = _mm512_fmadd_pd(ai, b1, c1[i]);
    }
    a += MR;
    b += 16;
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    _mm512_storeu_pd(acc + i * 16, c0[i]);
    _mm512_storeu_pd(acc + i * 16 + 8, c1[i]);
  }
}
#endif

template <typename T>
MicroKernel<T> pick_micro_kernel(CpuIsa isa) {
  using Tl = Tiling<T>;
#ifdef XRT_GEMM_X86
  if (isa == CpuIsa::kAvx2) {
    if constexpr (std::is_same_v<T, float>) return &micro_kernel_avx2_f32;
    else return &micro_kernel_avx2_f64;
  }
#endif
  return &micro_kernel_portable<T, Tl::MR, Tl::NR>;
}

// ---- packing ------------------------------------------------------------------

// A (mc×kc at `a`, strides rs/cs) → MR-row micro-panels: panel p holds rows
// [p·MR, p·MR+MR) as kc columns of MR values; rows past mc are zero.
template <typename S, typename T, int MR>
void pack_a(const S* a, int64_t rs, int64_t cs, int64_t mc, int64_t kc, T* out) {
  for (int64_t i0 = 0; i0 < mc; i0 += MR) {
    const int64_t mr = std::min<int64_t>(MR, mc - i0);
    T* dst = out + i0 * kc;
    for (int64_t p = 0; p < kc; ++p) {
      const S* src = a + i0 * rs + p * cs;
      int64_t i = 0;
      for (; i < mr; ++i) dst[p * MR + i] = to_compute<T>(src[i * rs]);
      for (; i < MR; ++i) dst[p * MR + i] = T(0);
    }
  }
}

// B (kc×nc at `b`) → NR-column micro-panels: panel q holds columns [q·NR, q·NR+NR)
// as kc rows of NR values; columns past nc are zero.
template <typename S, typename T, int NR>
void pack_b(const S* b, int64_t rs, int64_t cs, int64_t kc, int64_t nc, T* out) {
  for (int64_t j0 = 0; j0 < nc; j0 += NR) {
    const int64_t nr = std::min<int64_t>(NR, nc - j0);
    T* dst = out + j0 * kc;
    for (int64_t p = 0; p < kc; ++p) {
      const S* src = b + p * rs + j0 * cs;
      T* row = dst + p * NR;
      int64_t j = 0;
      if (cs == 1) {
        for (; j < nr; ++j) row[j] = to_compute<T>(src[j]);
      } else {
        for (; j < nr; ++j) row[j] = to_compute<T>(src[j * cs]);
      }
      for (; j < NR; ++j) row[j] = T(0);
    }
  }
}

// Packing scratch, 64-byte aligned for vector loads. Kept per calling thread and
// grown on demand, so small repeated GEMMs do not pay an allocation (large ones
// would otherwise mmap and unmap hundreds of KiB per call).
template <typename T>
class Scratch {
 public:
  T* get(std::size_t count) {
    if (count > capacity_) {
      const std::size_t bytes = (count * sizeof(T) + 63) / 64 * 64;
      T* p = static_cast<T*>(std::aligned_alloc(64, bytes));
      if (!p) throw std::bad_alloc();
      ptr_.reset(p);
      capacity_ = count;
    }
    return ptr_.get();
  }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> ptr_;
  std::size_t capacity_ = 0;
};

template <typename T>
T* thread_scratch(std::size_t count) {
  thread_local Scratch<T> scratch;
  return scratch.get(std::max<std::size_t>(count, 1));
}

// ---- driver -------------------------------------------------------------------

template <typename S, typename T, typename Tl>
void run_blocked(const GemmProblem& p, MicroKernel<T> uk, int threads) {
  constexpr int MR = Tl::MR, NR = Tl::NR, MC = Tl::MC, KC = Tl::KC, NC = Tl::NC;
  // fp32/fp64 accumulate partial K sums in C itself; fp16/bf16 keep them in an
  // fp32 tile so rounding to 16 bits happens once, at the end.
  constexpr bool kDirect = std::is_same_v<S, T>;

  const S* A = static_cast<const S*>(p.a.data);
  const S* B = static_cast<const S*>(p.b.data);
  S* C = static_cast<S*>(p.c);
  const int64_t m = p.m, n = p.n, k = p.k;
  std::vector<T> bias(p.bias ? n : 0);
  for (int64_t j = 0; j < static_cast<int64_t>(bias.size()); ++j)
    bias[j] = to_compute<T>(static_cast<const S*>(p.bias)[j]);
  const T* bias_ptr = bias.empty() ? nullptr : bias.data();
  const Activation act = p.activation;

  auto epilogue = [&](T v, int64_t j) {
    if (bias_ptr) v += bias_ptr[j];
    return activate(v, act);
  };

  if (k == 0) {  // empty sum: C = act(bias)
    for (int64_t bi = 0; bi < p.batch; ++bi)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
          C[bi * p.c_bs + i * p.c_rs + j * p.c_cs] = FromCompute<S>::cvt(epilogue(T(0), j));
    return;
  }

  const int64_t mblocks = (m + MC - 1) / MC, nblocks = (n + NC - 1) / NC;
  const int64_t tasks = p.batch * mblocks * nblocks;
  int nthreads = 1;
#ifdef _OPENMP
  // Small problems run on the calling thread: waking a team costs more than it saves.
  if (tasks > 1 && p.flops() >= (int64_t{1} << 20)) {
    nthreads = threads > 0 ? threads : cpu::blocking_threads();  // 1 when contended
    nthreads = static_cast<int>(std::min<int64_t>(nthreads, tasks));
  }
#endif
  // Per-thread slices of one buffer of the calling thread, sized to this problem.
  auto round_up = [](int64_t v, int64_t r) { return (v + r - 1) / r * r; };
  const int64_t mc_max = std::min<int64_t>(MC, round_up(m, MR));
  const int64_t nc_max = std::min<int64_t>(NC, round_up(n, NR));
  const int64_t kc_max = std::min<int64_t>(KC, k);
  const std::size_t a_size = round_up(mc_max * kc_max, 16), b_size = round_up(kc_max * nc_max, 16);
  const std::size_t c_size = kDirect ? 0 : round_up(mc_max * nc_max, 16);
  T* scratch = thread_scratch<T>((a_size + b_size + c_size) * nthreads);

  auto run_task = [&](int64_t t, int tid) {
    T* ap = scratch + (a_size + b_size + c_size) * tid;
    T* bp = ap + a_size;
    T* cacc = bp + b_size;
    alignas(64) T acc[MR * NR];
    const int64_t bi = t / (mblocks * nblocks);
    const int64_t rest = t % (mblocks * nblocks);
    const int64_t i0 = (rest / nblocks) * MC, j0 = (rest % nblocks) * NC;
    const int64_t mc = std::min<int64_t>(MC, m - i0), nc = std::min<int64_t>(NC, n - j0);
    const S* Ab = A + bi * p.a.bs + i0 * p.a.rs;
    const S* Bb = B + bi * p.b.bs + j0 * p.b.cs;
    S* Cb = C + bi * p.c_bs + i0 * p.c_rs + j0 * p.c_cs;
    for (int64_t pc = 0; pc < k; pc += KC) {
      const int64_t kc = std::min<int64_t>(KC, k - pc);
      const bool first = pc == 0, last = pc + kc >= k;
      pack_b<S, T, NR>(Bb + pc * p.b.rs, p.b.rs, p.b.cs, kc, nc, bp);
      pack_a<S, T, MR>(Ab + pc * p.a.cs, p.a.rs, p.a.cs, mc, kc, ap);
      for (int64_t jr = 0; jr < nc; jr += NR) {
        const int64_t nr = std::min<int64_t>(NR, nc - jr);
        for (int64_t ir = 0; ir < mc; ir += MR) {
          const int64_t mr = std::min<int64_t>(MR, mc - ir);
          uk(kc, ap + ir * kc, bp + jr * kc, acc);
          if constexpr (kDirect) {
            S* ct = Cb + ir * p.c_rs + jr * p.c_cs;
            for (int64_t i = 0; i < mr; ++i) {
              for (int64_t j = 0; j < nr; ++j) {
                S& dst = ct[i * p.c_rs + j * p.c_cs];
                T v = acc[i * NR + j];
                if (!first) v += dst;
                dst = last ? epilogue(v, j0 + jr + j) : v;
              }
            }
          } else {
            T* ct = cacc + ir * nc_max + jr;
            for (int64_t i = 0; i < mr; ++i)
              for (int64_t j = 0; j < nr; ++j)
                ct[i * nc_max + j] = first ? acc[i * NR + j] : ct[i * nc_max + j] + acc[i * NR + j];
          }
        }
      }
    }
    if constexpr (!kDirect) {
      for (int64_t i = 0; i < mc; ++i)
        for (int64_t j = 0; j < nc; ++j)
          Cb[i * p.c_rs + j * p.c_cs] = FromCompute<S>::cvt(epilogue(cacc[i * nc_max + j], j0 + j));
    }
  };

#ifdef _OPENMP
  if (nthreads > 1) {
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t t = 0; t < tasks; ++t) run_task(t, omp_get_thread_num());
    return;
  }
#endif
  for (int64_t t = 0; t < tasks; ++t) run_task(t, 0);
}

}  // namespace

bool cpu_has_avx2_fma() {
#ifdef XRT_GEMM_X86
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

bool cpu_has_avx512f() {
#ifdef XRT_GEMM_X86
  // (libgcc's check includes the OS saving the zmm state: XCR0 bits 5-7)
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
#else
  return false;
#endif
}

CpuIsa cpu_best_isa() {
  if (cpu_has_avx512f()) return CpuIsa::kAvx512;
  return cpu_has_avx2_fma() ? CpuIsa::kAvx2 : CpuIsa::kPortable;
}

std::string_view cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kPortable: return "portable";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    default: return cpu_isa_name(cpu_best_isa());
  }
}

void cpu_gemm_blocked(const GemmProblem& p, int threads, CpuIsa isa) {
  if (isa == CpuIsa::kAuto) isa = cpu_best_isa();
  XRT_CHECK(isa != CpuIsa::kAvx2 || cpu_has_avx2_fma(), InvalidArgumentError,
            "cpu_blocked: the AVX2/FMA micro-kernel was requested but this CPU lacks AVX2 or "
            "FMA; use CpuIsa::kAuto or kPortable");
  XRT_CHECK(isa != CpuIsa::kAvx512 || cpu_has_avx512f(), InvalidArgumentError,
            "cpu_blocked: the AVX-512 micro-kernel was requested but this CPU (or OS) lacks "
            "AVX-512F; use CpuIsa::kAuto, kAvx2 or kPortable");
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
  visit_float_dtype(p.dtype, "cpu_blocked matmul", [&](auto tag) {
    using S = decltype(tag);
    using T = std::conditional_t<std::is_same_v<S, double>, double, float>;
#ifdef XRT_GEMM_X86
    if (isa == CpuIsa::kAvx512) {
      if constexpr (std::is_same_v<T, float>)
        run_blocked<S, T, Tiling512<T>>(p, &micro_kernel_avx512_f32, threads);
      else
        run_blocked<S, T, Tiling512<T>>(p, &micro_kernel_avx512_f64, threads);
      return;
    }
#endif
    run_blocked<S, T, Tiling<T>>(p, pick_micro_kernel<T>(isa), threads);
  });
}

}  // namespace xpuruntime::matmul
