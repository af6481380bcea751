// The CPU GEMM kernels (cpu_blocked with each micro-kernel, cpu_blas) against a
// naive float64 reference on fresh random inputs: odd sizes, batches, transposed
// and arbitrarily strided operands, broadcast batches, column-major outputs, all
// epilogues, fp32/fp64/fp16/bf16, and the empty cases.
//
// Tolerance: each C element may differ from the exact product of the stored inputs
// by at most (K + 4)·u·Σ|a||b| (the classical bound for a K-term sum in unit
// roundoff u) plus the output rounding u_out·|c|. A wrong index or a missing
// term breaks that by orders of magnitude.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/matmul/cpu_gemm_common.h"
#include "backends/cpu/kernels/matmul/cpu_gemm_impl.h"

namespace xm = xpuruntime::matmul;
using xpuruntime::DType;

namespace {

uint64_t fresh_seed() {
  static const uint64_t seed = std::random_device{}();
  return seed;
}

double unit_roundoff(DType t) {
  switch (t) {
    case DType::kFloat64: return std::ldexp(1.0, -53);
    case DType::kFloat16: return std::ldexp(1.0, -11);
    case DType::kBFloat16: return std::ldexp(1.0, -8);
    default: return std::ldexp(1.0, -24);
  }
}
// Half the spacing of the output format's subnormals: the absolute rounding error of
// a result that lands below the smallest normal (fp16 reaches there at 6.1e-5, where
// the relative bound alone is too tight).
double subnormal_half_spacing(DType t) {
  switch (t) {
    case DType::kFloat64: return std::ldexp(1.0, -1075);
    case DType::kFloat16: return std::ldexp(1.0, -25);
    case DType::kBFloat16: return std::ldexp(1.0, -134);
    default: return std::ldexp(1.0, -150);
  }
}
// fp16/bf16 accumulate in fp32.
double accumulate_roundoff(DType t) {
  return t == DType::kFloat64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
}

// Storage of one dtype with double read/write helpers.
struct Buffer {
  DType dtype;
  std::vector<unsigned char> bytes;
  Buffer(DType t, int64_t count) : dtype(t), bytes(static_cast<std::size_t>(count) * size(t)) {}
  static std::size_t size(DType t) {
    return t == DType::kFloat64 ? 8 : (t == DType::kFloat32 ? 4 : 2);
  }
  void* data() { return bytes.data(); }
  double get(int64_t i) const {
    const unsigned char* p = bytes.data() + i * size(dtype);
    switch (dtype) {
      case DType::kFloat64: return *reinterpret_cast<const double*>(p);
      case DType::kFloat32: return *reinterpret_cast<const float*>(p);
      case DType::kFloat16: return xm::half_to_float(*reinterpret_cast<const uint16_t*>(p));
      default: return xm::bf16_to_float(*reinterpret_cast<const uint16_t*>(p));
    }
  }
  void set(int64_t i, double v) {
    unsigned char* p = bytes.data() + i * size(dtype);
    switch (dtype) {
      case DType::kFloat64: *reinterpret_cast<double*>(p) = v; break;
      case DType::kFloat32: *reinterpret_cast<float*>(p) = static_cast<float>(v); break;
      case DType::kFloat16:
        *reinterpret_cast<uint16_t*>(p) = xm::float_to_half(static_cast<float>(v));
        break;
      default: *reinterpret_cast<uint16_t*>(p) = xm::float_to_bf16(static_cast<float>(v)); break;
    }
  }
};

enum class Layout { kRowMajor, kTransposed, kStrided, kPadded };

struct Case {
  DType dtype = DType::kFloat32;
  int64_t batch = 1, m = 1, n = 1, k = 1;
  Layout a = Layout::kRowMajor, b = Layout::kRowMajor;
  bool c_col_major = false;
  bool a_broadcast = false, b_broadcast = false;  // batch stride 0
  bool bias = false;
  xm::Activation act = xm::Activation::kNone;
};

std::string describe(const Case& c) {
  auto lay = [](Layout l) {
    return l == Layout::kRowMajor ? "row" : l == Layout::kTransposed ? "T" : l == Layout::kStrided ? "strided" : "padded";
  };
  return std::string(xpuruntime::dtype_name(c.dtype)) + " b" + std::to_string(c.batch) + " " +
         std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + " a=" +
         lay(c.a) + " b=" + lay(c.b) + (c.c_col_major ? " c=col" : "") +
         (c.a_broadcast ? " a_bcast" : "") + (c.b_broadcast ? " b_bcast" : "") +
         (c.bias ? " bias" : "") + " act=" + std::string(xm::activation_name(c.act)) +
         " seed=" + std::to_string(fresh_seed());
}

// A rows×cols matrix per batch stored in `layout`; returns (rs, cs, bs, total elements).
struct Placement {
  int64_t rs, cs, bs, total;
};
Placement place(Layout l, int64_t rows, int64_t cols, int64_t batch, bool broadcast) {
  Placement p{};
  switch (l) {
    case Layout::kRowMajor: p = {cols, 1, rows * cols, 0}; break;
    case Layout::kTransposed: p = {1, rows, rows * cols, 0}; break;
    case Layout::kPadded: p = {cols + 3, 1, rows * (cols + 3), 0}; break;
    case Layout::kStrided: p = {2 * cols * 3, 3, rows * cols * 6, 0}; break;  // no unit stride
  }
  const int64_t per = std::max<int64_t>(p.bs, 1);
  p.total = broadcast ? per : per * batch;
  if (broadcast) p.bs = 0;
  return p;
}

struct Operands {
  Buffer a, b, c, bias;
  xm::GemmProblem prob;
};

Operands make(const Case& cs, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  const Placement pa = place(cs.a, cs.m, cs.k, cs.batch, cs.a_broadcast);
  const Placement pb = place(cs.b, cs.k, cs.n, cs.batch, cs.b_broadcast);
  Operands o{Buffer(cs.dtype, pa.total), Buffer(cs.dtype, pb.total),
             Buffer(cs.dtype, std::max<int64_t>(1, cs.batch * cs.m * cs.n)),
             Buffer(cs.dtype, std::max<int64_t>(1, cs.n)), {}};
  for (int64_t i = 0; i < pa.total; ++i) o.a.set(i, dist(rng));
  for (int64_t i = 0; i < pb.total; ++i) o.b.set(i, dist(rng));
  for (int64_t i = 0; i < cs.n; ++i) o.bias.set(i, dist(rng));
  // Poison the output so a kernel that skips an element is caught.
  for (int64_t i = 0; i < cs.batch * cs.m * cs.n; ++i) o.c.set(i, 1234.5);
  auto& p = o.prob;
  p.dtype = cs.dtype;
  p.batch = cs.batch;
  p.m = cs.m;
  p.n = cs.n;
  p.k = cs.k;
  p.a = {o.a.data(), pa.rs, pa.cs, pa.bs};
  p.b = {o.b.data(), pb.rs, pb.cs, pb.bs};
  p.c = o.c.data();
  if (cs.c_col_major) {
    p.c_rs = 1;
    p.c_cs = cs.m;
  } else {
    p.c_rs = cs.n;
    p.c_cs = 1;
  }
  p.c_bs = cs.m * cs.n;
  p.bias = cs.bias ? o.bias.data() : nullptr;
  p.activation = cs.act;
  return o;
}

void check(const Case& cs, const std::function<void(const xm::GemmProblem&)>& kernel,
           std::mt19937_64& rng) {
  Operands o = make(cs, rng);
  kernel(o.prob);
  const auto& p = o.prob;
  const double u_acc = accumulate_roundoff(cs.dtype), u_out = unit_roundoff(cs.dtype);
  int64_t bad = 0;
  for (int64_t bi = 0; bi < cs.batch; ++bi) {
    for (int64_t i = 0; i < cs.m; ++i) {
      for (int64_t j = 0; j < cs.n; ++j) {
        double ref = 0, mag = 0;
        for (int64_t q = 0; q < cs.k; ++q) {
          const double av = o.a.get(bi * p.a.bs + i * p.a.rs + q * p.a.cs);
          const double bv = o.b.get(bi * p.b.bs + q * p.b.rs + j * p.b.cs);
          ref += av * bv;
          mag += std::abs(av * bv);
        }
        if (cs.bias) {
          ref += o.bias.get(j);
          mag += std::abs(o.bias.get(j));
        }
        ref = xm::activate(ref, cs.act);
        const double got = o.c.get(bi * p.c_bs + i * p.c_rs + j * p.c_cs);
        // 1.2: the activations' slopes are at most ~1.13.
        const double tol = 1.2 * (cs.k + 4) * u_acc * mag + 2 * u_out * std::abs(ref) +
                           subnormal_half_spacing(cs.dtype) + 1e-300;
        if (!(std::abs(got - ref) <= tol) && bad++ < 5) {
          ADD_FAILURE() << describe(cs) << " C[" << bi << "," << i << "," << j << "] = " << got
                        << ", reference " << ref << ", tolerance " << tol;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << describe(cs);
}

struct NamedKernel {
  std::string name;
  std::function<void(const xm::GemmProblem&)> fn;
};

std::vector<NamedKernel> kernels_under_test() {
  std::vector<NamedKernel> ks;
  ks.push_back({"blocked_portable", [](const xm::GemmProblem& p) {
                  xm::cpu_gemm_blocked(p, 0, xm::CpuIsa::kPortable);
                }});
  if (xm::cpu_has_avx2_fma()) {
    ks.push_back({"blocked_avx2", [](const xm::GemmProblem& p) {
                    xm::cpu_gemm_blocked(p, 0, xm::CpuIsa::kAvx2);
                  }});
  }
  if (xm::cpu_has_avx512f()) {
    ks.push_back({"blocked_avx512", [](const xm::GemmProblem& p) {
                    xm::cpu_gemm_blocked(p, 0, xm::CpuIsa::kAvx512);
                  }});
  }
  ks.push_back({"blocked_1thread", [](const xm::GemmProblem& p) { xm::cpu_gemm_blocked(p, 1); }});
  if (xm::cpu_blas_available()) {
    ks.push_back({"blas", [](const xm::GemmProblem& p) { xm::cpu_gemm_blas(p); }});
  }
  return ks;
}

class CpuGemm : public ::testing::TestWithParam<std::string> {
 protected:
  std::function<void(const xm::GemmProblem&)> kernel() const {
    for (auto& k : kernels_under_test())
      if (k.name == GetParam()) return k.fn;
    return {};
  }
  std::mt19937_64 rng{fresh_seed()};
};

TEST_P(CpuGemm, OddAndBlockBoundaryShapes) {
  auto k = kernel();
  // Sizes straddle the micro-tile (6, 8, 16) and block (96, 128, 256) edges.
  const int64_t shapes[][3] = {{1, 1, 1},   {1, 17, 5},   {7, 1, 13},   {5, 9, 1},
                               {6, 16, 8},  {13, 31, 29}, {97, 65, 33}, {95, 257, 3},
                               {130, 47, 300}, {64, 64, 513}, {255, 129, 200}};
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    for (auto& s : shapes) {
      Case c;
      c.dtype = t;
      c.m = s[0];
      c.n = s[1];
      c.k = s[2];
      check(c, k, rng);
    }
  }
}

TEST_P(CpuGemm, RandomShapesLayoutsAndEpilogues) {
  auto k = kernel();
  std::uniform_int_distribution<int64_t> dim(1, 150), batch(1, 4), pick(0, 3), act(0, 2);
  const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};
  for (int trial = 0; trial < 40; ++trial) {
    Case c;
    c.dtype = dtypes[trial % 4];
    c.batch = batch(rng);
    c.m = dim(rng);
    c.n = dim(rng);
    c.k = dim(rng);
    c.a = static_cast<Layout>(pick(rng));
    c.b = static_cast<Layout>(pick(rng));
    c.c_col_major = pick(rng) == 0;
    c.a_broadcast = c.batch > 1 && pick(rng) == 0;
    c.b_broadcast = c.batch > 1 && !c.a_broadcast && pick(rng) == 0;
    c.bias = pick(rng) < 2;
    c.act = static_cast<xm::Activation>(act(rng));
    check(c, k, rng);
  }
}

TEST_P(CpuGemm, HalfTypesWithLongK) {
  // K beyond one KC block: partial sums must stay in fp32 between blocks.
  auto k = kernel();
  for (DType t : {DType::kFloat16, DType::kBFloat16}) {
    Case c;
    c.dtype = t;
    c.batch = 2;
    c.m = 33;
    c.n = 40;
    c.k = 700;
    c.bias = true;
    c.act = xm::Activation::kGelu;
    check(c, k, rng);
  }
}

TEST_P(CpuGemm, EmptyReductionGivesActivatedBias) {
  auto k = kernel();
  Case c;
  c.m = 4;
  c.n = 7;
  c.k = 0;
  c.bias = true;
  c.act = xm::Activation::kRelu;
  check(c, k, rng);
  c.bias = false;
  c.act = xm::Activation::kNone;
  check(c, k, rng);
}

TEST_P(CpuGemm, EmptyOutputTouchesNothing) {
  auto k = kernel();
  float sentinel = 42.0f;
  xm::GemmProblem p;
  p.m = 0;
  p.n = 5;
  p.k = 3;
  p.a = {&sentinel, 3, 1, 0};
  p.b = {&sentinel, 5, 1, 0};
  p.c = &sentinel;
  k(p);
  EXPECT_EQ(sentinel, 42.0f);
}

TEST_P(CpuGemm, RejectsIntegerDtype) {
  auto k = kernel();
  int32_t x = 1;
  xm::GemmProblem p;
  p.dtype = DType::kInt32;
  p.m = p.n = p.k = 1;
  p.a = {&x, 1, 1, 0};
  p.b = {&x, 1, 1, 0};
  p.c = &x;
  try {
    k(p);
    FAIL() << "int32 matmul did not throw";
  } catch (const xpuruntime::InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("int32"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CpuGemm,
                         ::testing::ValuesIn([] {
                           std::vector<std::string> names;
                           for (auto& k : kernels_under_test()) names.push_back(k.name);
                           return names;
                         }()),
                         [](const auto& info) { return info.param; });

TEST(CpuGemmBlocked, LargeMultithreadedAgreesWithSingleThreaded) {
  // Different thread counts split tiles differently but each tile is computed the
  // same way, so the results must be bitwise equal.
  std::mt19937_64 rng(fresh_seed());
  Case c;
  c.batch = 3;
  c.m = 301;
  c.n = 517;
  c.k = 411;
  c.bias = true;
  c.act = xm::Activation::kGelu;
  Operands o1 = make(c, rng);
  Operands o2 = o1;
  o2.prob.a.data = o2.a.data();
  o2.prob.b.data = o2.b.data();
  o2.prob.c = o2.c.data();
  o2.prob.bias = o2.bias.data();
  xm::cpu_gemm_blocked(o1.prob, 1);
  xm::cpu_gemm_blocked(o2.prob, 2);
  EXPECT_EQ(o1.c.bytes, o2.c.bytes);
}

// The CPU GEMM kernels pin OpenBLAS to one thread through cpu_blas_set_threads (our
// pool splits the work): the set and get must reach the library the build linked (system or scipy-openblas32,
// whose symbols carry a prefix), so the count set is the one read back.
TEST(CpuGemmBlas, SetThreadsReachesTheLinkedOpenBlas) {
  if (!xm::cpu_blas_available()) {
    EXPECT_EQ(xm::cpu_blas_set_threads(2), 0);
    GTEST_SKIP() << xm::cpu_blas_info();
  }
  const int before = xm::cpu_blas_set_threads(2);
  EXPECT_GT(before, 0);
  EXPECT_EQ(xm::cpu_blas_set_threads(1), 2);
  EXPECT_EQ(xm::cpu_blas_set_threads(0), 1);  // 0: leave it, report it
  EXPECT_EQ(xm::cpu_blas_set_threads(before), 1);
  EXPECT_EQ(xm::cpu_blas_info().rfind("OpenBLAS", 0), 0u) << xm::cpu_blas_info();
}

TEST(CpuGemmBlocked, AutoPicksTheWidestIsaTheCpuHas) {
  const xm::CpuIsa want = xm::cpu_has_avx512f()   ? xm::CpuIsa::kAvx512
                          : xm::cpu_has_avx2_fma() ? xm::CpuIsa::kAvx2
                                                   : xm::CpuIsa::kPortable;
  EXPECT_EQ(xm::cpu_best_isa(), want);
  EXPECT_EQ(xm::cpu_isa_name(xm::CpuIsa::kAuto), xm::cpu_isa_name(want));
}

TEST(CpuGemmBlocked, Avx512RequestWithoutAvx512IsATypedError) {
  if (xm::cpu_has_avx512f()) GTEST_SKIP() << "this CPU has AVX-512F; the error path cannot trigger";
  xm::GemmProblem p;
  EXPECT_THROW(xm::cpu_gemm_blocked(p, 0, xm::CpuIsa::kAvx512), xpuruntime::InvalidArgumentError);
}

TEST(CpuGemmBlocked, AvxRequestWithoutAvxIsATypedError) {
  if (xm::cpu_has_avx2_fma()) GTEST_SKIP() << "this CPU has AVX2/FMA; the error path cannot trigger";
  xm::GemmProblem p;
  EXPECT_THROW(xm::cpu_gemm_blocked(p, 0, xm::CpuIsa::kAvx2), xpuruntime::InvalidArgumentError);
}

TEST(HalfFloat, RoundTripAndRounding) {
  // Every finite half survives half -> float -> half.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) continue;  // nan payloads
    EXPECT_EQ(xm::float_to_half(xm::half_to_float(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
  EXPECT_EQ(xm::float_to_half(65520.0f), 0x7c00);  // ties away from max finite: inf
  EXPECT_EQ(xm::float_to_half(65519.0f), 0x7bff);
  EXPECT_EQ(xm::float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (zero)
  EXPECT_EQ(xm::float_to_half(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(xm::float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie to even
  EXPECT_EQ(xm::float_to_bf16(1.0f + std::ldexp(3.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(xm::bf16_to_float(xm::float_to_bf16(std::nanf("")))));
}

}  // namespace
