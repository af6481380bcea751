// cpu_blas: GEMM through the CBLAS the build found (OpenBLAS from Debian in CI, or
// scipy-openblas32 from PyPI for `pip install .` without apt; see cblas_api.h).
// Without XRT_HAVE_CBLAS only the availability functions are compiled:
// cpu_blas_available() is false and the registered kernel refuses every case with
// reason backend_unavailable and the install hint.
#include <algorithm>
#include <vector>

#include "backends/cpu/kernels/matmul/cpu_gemm_common.h"
#include "backends/cpu/kernels/matmul/cpu_gemm_impl.h"

#ifdef XRT_HAVE_CBLAS
#include "backends/cpu/kernels/matmul/cblas_api.h"
#endif

namespace xpuruntime::matmul {

#ifdef XRT_HAVE_CBLAS
namespace {

template <typename T>
void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
               const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    XRT_BLAS(cblas_sgemm)(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n),
                static_cast<blasint>(k), 1.0f, a, static_cast<blasint>(lda), b,
                static_cast<blasint>(ldb), 0.0f, c, static_cast<blasint>(ldc));
  } else {
    XRT_BLAS(cblas_dgemm)(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n),
                static_cast<blasint>(k), 1.0, a, static_cast<blasint>(lda), b,
                static_cast<blasint>(ldb), 0.0, c, static_cast<blasint>(ldc));
  }
}

// A matrix view BLAS can read: pointer, transpose flag and leading dimension.
// Views BLAS cannot express (no unit stride, or converted types) are copied into
// `scratch` as a row-major T matrix first.
template <typename T>
struct BlasOperand {
  const T* data;
  CBLAS_TRANSPOSE trans;
  int64_t ld;
};

template <typename S, typename T>
BlasOperand<T> blas_operand(const S* src, int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                            std::vector<T>& scratch) {
  if constexpr (std::is_same_v<S, T>) {
    if (auto l = blas_layout(rows, cols, rs, cs)) {
      return {src, l->transposed ? CblasTrans : CblasNoTrans, l->ld};
    }
  }
  scratch.resize(static_cast<std::size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) scratch[i * cols + j] = to_compute<T>(src[i * rs + j * cs]);
  return {scratch.data(), CblasNoTrans, std::max<int64_t>(1, cols)};
}

template <typename S, typename T>
void run_blas(const GemmProblem& p) {
  const S* A = static_cast<const S*>(p.a.data);
  const S* B = static_cast<const S*>(p.b.data);
  S* C = static_cast<S*>(p.c);
  const S* bias = static_cast<const S*>(p.bias);
  const bool need_epilogue = bias != nullptr || p.activation != Activation::kNone;
  // C is written in place when BLAS can address it (row-major, or column-major by
  // computing Cᵀ = Bᵀ·Aᵀ) and has the compute type; otherwise through a temporary.
  const bool c_same_type = std::is_same_v<S, T>;
  auto c_layout = blas_layout(p.m, p.n, p.c_rs, p.c_cs);
  std::vector<T> a_tmp, b_tmp, c_tmp;
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    const S* Ab = A + bi * p.a.bs;
    const S* Bb = B + bi * p.b.bs;
    S* Cb = C + bi * p.c_bs;
    T* cptr;
    int64_t ldc;
    bool c_transposed = false;
    if (c_same_type && c_layout) {
      cptr = reinterpret_cast<T*>(Cb);
      ldc = c_layout->ld;
      c_transposed = c_layout->transposed;
    } else {
      c_tmp.resize(static_cast<std::size_t>(p.m * p.n));
      cptr = c_tmp.data();
      ldc = std::max<int64_t>(1, p.n);
    }
    if (p.k == 0) {
      for (int64_t i = 0; i < p.m; ++i)
        for (int64_t j = 0; j < p.n; ++j)
          cptr[c_transposed ? j * ldc + i : i * ldc + j] = T(0);
    } else if (!c_transposed) {
      auto a = blas_operand<S, T>(Ab, p.m, p.k, p.a.rs, p.a.cs, a_tmp);
      auto b = blas_operand<S, T>(Bb, p.k, p.n, p.b.rs, p.b.cs, b_tmp);
      blas_gemm<T>(a.trans, b.trans, p.m, p.n, p.k, a.data, a.ld, b.data, b.ld, cptr, ldc);
    } else {
      // Cᵀ (N×M, row-major with ldc) = Bᵀ·Aᵀ: the operands swap and so do their strides.
      auto bt = blas_operand<S, T>(Bb, p.n, p.k, p.b.cs, p.b.rs, b_tmp);
      auto at = blas_operand<S, T>(Ab, p.k, p.m, p.a.cs, p.a.rs, a_tmp);
      blas_gemm<T>(bt.trans, at.trans, p.n, p.m, p.k, bt.data, bt.ld, at.data, at.ld, cptr, ldc);
    }
    const bool via_tmp = cptr == c_tmp.data() && !c_tmp.empty();
    if (!via_tmp && !need_epilogue) continue;
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        T v = cptr[c_transposed ? j * ldc + i : i * ldc + j];
        if (bias) v += to_compute<T>(bias[j]);
        v = activate(v, p.activation);
        Cb[i * p.c_rs + j * p.c_cs] = FromCompute<S>::cvt(v);
      }
    }
  }
}

}  // namespace

bool cpu_blas_available() { return true; }

int cpu_blas_set_threads(int threads) {
  const int before = XRT_BLAS(openblas_get_num_threads)();
  if (threads > 0 && threads != before) XRT_BLAS(openblas_set_num_threads)(threads);
  return before;
}

std::string cpu_blas_info() {
  // The config string ("OpenBLAS 0.3.21 DYNAMIC_ARCH ...") and where it came from.
  return std::string(XRT_BLAS(openblas_get_config)()) + " [" XRT_BLAS_SOURCE "]";
}

void cpu_gemm_blas(const GemmProblem& p) {
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
  visit_float_dtype(p.dtype, "cpu_blas matmul", [&](auto tag) {
    using S = decltype(tag);
    using T = std::conditional_t<std::is_same_v<S, double>, double, float>;
    run_blas<S, T>(p);
  });
}

#else  // no CBLAS in this build

bool cpu_blas_available() { return false; }

int cpu_blas_set_threads(int) { return 0; }

std::string cpu_blas_info() {
#ifdef XRT_BLAS_OFF
  return "built without CBLAS (configured with XRT_BLAS=OFF)";
#else
  return "built without CBLAS: no OpenBLAS found (pip install scipy-openblas32 or apt install "
         "libopenblas-dev, then rebuild to enable cpu_blas)";
#endif
}

void cpu_gemm_blas(const GemmProblem&) {
  XRT_THROW(BackendUnavailableError, "cpu_blas matmul: ", cpu_blas_info());
}

#endif

}  // namespace xpuruntime::matmul
