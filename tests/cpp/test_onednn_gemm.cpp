// GEMM kernel "onednn" (oneDNN's matmul primitive) against a float64 reference
// on random inputs: transposed A and B, batches with A or B shared (batch
// stride 0), a strided C whose gaps must stay untouched, bias, relu and
// tanh-GELU, K up to 3072, the empty cases; which problems it rejects and why
// (and that run_gemm then still computes them on the cpu_blas path); the
// primitive cache; calls from inside our pool's parallel jobs; the registry's
// "onednn" matmul kernel. Skips, saying why, in a build without oneDNN, after
// checking that every problem is then rejected with the install hint.
//
// Tolerance: |c - ref| <= 1e-5 · (1 + Σ_k |a||b|), well above fp32's rounding
// of a K-term sum for these sizes and far below what a wrong index or term
// gives.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/kernels/contention.h"
#include "backends/cpu/kernels/onednn/onednn_context.h"
#include "backends/cpu/kernels/onednn/onednn_gemm.h"
#include "backends/cpu/kernels/gemm_call.h"
#include "backends/cpu/kernels/parallel.h"
#include "cpu_test_util.h"

namespace xpuruntime::cpu {
namespace {

using matmul::Activation;
using matmul::GemmProblem;
using Kind = matmul::GemmRejection::Kind;

// One problem's storage and layout choices.
struct Case {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool ta = false, tb = false;  // A (B) stored transposed
  bool share_a = false,
       share_b = false;  // one matrix for every batch (stride 0)
  int64_t c_pad = 0;     // extra elements after each C row
  bool bias = false;
  Activation act = Activation::kNone;
};

struct Data {
  std::vector<float> a, b, bias, c;
  GemmProblem p;
  std::vector<double> ref,
      mag;  // per C element (dense batch×m×n): exact value, Σ|a||b|
};

double activate(Activation act, double v) {
  if (act == Activation::kRelu) return v > 0 ? v : 0;
  if (act == Activation::kGelu)
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  return v;
}

Data make(const Case& c, unsigned seed) {
  Data d;
  const int64_t ba = c.share_a ? 1 : c.batch, bb = c.share_b ? 1 : c.batch;
  d.a = test::randn(static_cast<std::size_t>(ba * c.m * c.k), seed);
  d.b = test::randn(static_cast<std::size_t>(bb * c.k * c.n), seed + 1);
  d.bias = test::randn(static_cast<std::size_t>(c.n), seed + 2);
  const int64_t ldc = c.n + c.c_pad;
  d.c.assign(static_cast<std::size_t>(c.batch * c.m * ldc),
             -7.f);  // the gaps keep -7
  GemmProblem& p = d.p;
  p.batch = c.batch, p.m = c.m, p.n = c.n, p.k = c.k;
  // A: M×K, stored row-major, or as its K×M transpose.
  p.a = {d.a.data(), c.ta ? 1 : c.k, c.ta ? c.m : 1, c.share_a ? 0 : c.m * c.k};
  p.b = {d.b.data(), c.tb ? 1 : c.n, c.tb ? c.k : 1, c.share_b ? 0 : c.k * c.n};
  p.c = d.c.data();
  p.c_rs = ldc, p.c_cs = 1, p.c_bs = c.m * ldc;
  p.bias = c.bias ? d.bias.data() : nullptr;
  p.activation = c.act;
  d.ref.resize(static_cast<std::size_t>(c.batch * c.m * c.n));
  d.mag.resize(d.ref.size());
  for (int64_t bi = 0; bi < c.batch; ++bi)
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double acc = c.bias ? d.bias[j] : 0.0, mag = std::abs(acc);
        for (int64_t t = 0; t < c.k; ++t) {
          const double x = d.a[(c.share_a ? 0 : bi * c.m * c.k) + i * p.a.rs + t * p.a.cs];
          const double y = d.b[(c.share_b ? 0 : bi * c.k * c.n) + t * p.b.rs + j * p.b.cs];
          acc += x * y;
          mag += std::abs(x * y);
        }
        const std::size_t at = static_cast<std::size_t>((bi * c.m + i) * c.n + j);
        d.ref[at] = activate(c.act, acc);
        d.mag[at] = mag;
      }
  return d;
}

void expect_matches(const Case& c, const Data& d) {
  const int64_t ldc = c.n + c.c_pad;
  for (int64_t bi = 0; bi < c.batch; ++bi)
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < ldc; ++j) {
        const float got = d.c[static_cast<std::size_t>((bi * c.m + i) * ldc + j)];
        if (j >= c.n) {
          ASSERT_EQ(got, -7.f) << "gap of C row " << i << " written";
          continue;
        }
        const std::size_t at = static_cast<std::size_t>((bi * c.m + i) * c.n + j);
        ASSERT_NEAR(got, d.ref[at], 1e-5 * (1 + d.mag[at])) << "batch " << bi << " row " << i << " col " << j;
      }
    }
}

std::string describe(const Case& c) {
  return std::to_string(c.batch) + "x" + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" +
         std::to_string(c.k) + " ta " + std::to_string(c.ta) + " tb " + std::to_string(c.tb) + " share " +
         std::to_string(c.share_a) + std::to_string(c.share_b) + " pad " + std::to_string(c.c_pad) +
         " bias " + std::to_string(c.bias) + " act " + std::string(matmul::activation_name(c.act));
}

// Runs the case with onednn_gemm itself (no fallback) and checks it.
void check(const Case& c, unsigned seed) {
  SCOPED_TRACE(describe(c));
  Data d = make(c, seed);
  EXPECT_FALSE(onednn_gemm_rejection(d.p)) << onednn_gemm_rejection(d.p).detail;
  onednn_gemm(d.p);
  expect_matches(c, d);
}

class OnednnGemm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!onednn::onednn_available()) {
      // Without oneDNN every problem is rejected with the install hint.
      Data d = make(Case{}, 1);
      std::string why;
      EXPECT_FALSE(onednn_gemm_supports(d.p, &why));
      EXPECT_EQ(why, onednn::onednn_info());
      EXPECT_THROW(onednn_gemm(d.p), BackendUnavailableError);
      GTEST_SKIP() << onednn::onednn_info();
    }
  }
};

TEST_F(OnednnGemm, TransformerShapesRunAFastImplementation) {
  for (const Case& c : {Case{1, 128, 3072, 768}, Case{1, 128, 768, 3072}, Case{1, 196, 128, 1152}}) {
    Case b = c;
    b.bias = true;
    SCOPED_TRACE(describe(b));
    Data d = make(b, 3);
    const std::string impl = onednn_gemm_impl(d.p);
    EXPECT_FALSE(impl.empty());
    EXPECT_NE(impl.rfind("ref", 0), 0u) << impl;
    onednn_gemm(d.p);
    expect_matches(b, d);
  }
}

TEST_F(OnednnGemm, TransposedOperandsBiasAndActivations) {
  unsigned seed = 10;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kGelu}) {
        Case c{1, 37, 45, 29, ta, tb};
        c.bias = act != Activation::kNone || ta;
        c.act = act;
        check(c, seed++);
      }
}

TEST_F(OnednnGemm, BatchesWithSharedOperandsAndStridedC) {
  unsigned seed = 40;
  for (bool share_a : {false, true})
    for (bool share_b : {false, true}) {
      Case c{5, 17, 23, 31};
      c.share_a = share_a, c.share_b = share_b;
      c.c_pad = 3;
      c.tb = share_b;
      c.bias = true;
      c.act = Activation::kRelu;
      if (!(share_a && share_b)) {
        check(c, seed++);
        continue;
      }
      // Both shared: oneDNN cannot say so (its output batch follows the
      // inputs'); rejected, and run_gemm computes it on the cpu_blas path.
      SCOPED_TRACE(describe(c));
      Data d = make(c, seed++);
      const matmul::GemmRejection r = onednn_gemm_rejection(d.p);
      EXPECT_EQ(r.kind, Kind::kLayout);
      EXPECT_NE(r.detail.find("both shared"), std::string::npos) << r.detail;
      run_gemm("onednn", d.p);
      expect_matches(c, d);
    }
}

TEST_F(OnednnGemm, OddSizesAndLongReduction) {
  check(Case{1, 3, 1, 1}, 60);
  check(Case{1, 3, 257, 3072, false, true, false, false, 0, true},
        61);  // three rows, N×K weights
  check(Case{1, 63, 1, 130}, 62);
  // One or two rows are matrix-vector products: refused with the reason (cpu_blas).
  for (int64_t m : {1, 2}) {
    Data d = make(Case{1, m, 257, 300}, 64);
    std::string why;
    EXPECT_FALSE(try_onednn_gemm(d.p, &why));
    EXPECT_NE(why.find("matrix-vector"), std::string::npos) << why;
  }
  check(Case{3, 9, 70, 3072, false, false, false, true, 5, true, Activation::kGelu}, 63);
}

TEST_F(OnednnGemm, EmptyDims) {
  // M or N (or batch) 0: nothing written. K 0: act(bias), or zeros.
  for (const Case& c : {Case{1, 0, 4, 3}, Case{1, 4, 0, 3}, Case{0, 4, 4, 3}}) {
    Data d = make(c, 70);
    std::vector<float> before = d.c;
    onednn_gemm(d.p);
    EXPECT_EQ(d.c, before);
  }
  for (Activation act : {Activation::kNone, Activation::kGelu}) {
    Case c{2, 3, 4, 0, false, false, false, false, 1, true, act};
    Data d = make(c, 71);
    onednn_gemm(d.p);
    expect_matches(c, d);
    c.bias = false;
    Data z = make(c, 72);
    onednn_gemm(z.p);
    expect_matches(c, z);
  }
}

TEST_F(OnednnGemm, RejectsWithTheReasonAndRunGemmFallsBackToBlas) {
  // float64: the dtype.
  Data d = make(Case{1, 4, 5, 6}, 80);
  GemmProblem f64 = d.p;
  f64.dtype = DType::kFloat64;
  EXPECT_EQ(onednn_gemm_rejection(f64).kind, Kind::kDtype);
  EXPECT_NE(onednn_gemm_rejection(f64).detail.find("float64"), std::string::npos);
  // The row sums of A: an epilogue oneDNN has not.
  GemmProblem sums = d.p;
  std::vector<float> rs(4);
  sums.a_row_sums = rs.data();
  EXPECT_EQ(onednn_gemm_rejection(sums).kind, Kind::kEpilogue);
  // An output whose batches overlap.
  Case cb{3, 4, 5, 6};
  Data ob = make(cb, 81);
  ob.p.c_bs = 0;
  EXPECT_EQ(onednn_gemm_rejection(ob.p).kind, Kind::kLayout);
  EXPECT_THROW(onednn_gemm(ob.p), UnsupportedOperationError);

  // A with neither rows nor columns contiguous (every other element of a 4×12
  // buffer as a 4×6 matrix read with column stride 2): rejected, and run_gemm
  // with "onednn" still computes it, on the cpu_blas path.
  Case c{1, 4, 5, 6, false, false, false, false, 0, true, Activation::kRelu};
  Data g = make(c, 82);
  std::vector<float> wide(static_cast<std::size_t>(4 * 12), 99.f);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t t = 0; t < 6; ++t)
      wide[static_cast<std::size_t>(i * 12 + 2 * t)] = g.a[static_cast<std::size_t>(i * 6 + t)];
  g.p.a = {wide.data(), 12, 2, 0};
  const matmul::GemmRejection r = onednn_gemm_rejection(g.p);
  EXPECT_EQ(r.kind, Kind::kLayout);
  EXPECT_NE(r.detail.find("contiguous"), std::string::npos) << r.detail;
  std::string why;
  EXPECT_FALSE(try_onednn_gemm(g.p, &why));
  EXPECT_EQ(why, r.detail);
  run_gemm("onednn", g.p);
  expect_matches(c, g);
}

TEST_F(OnednnGemm, ActivationsKeepNanAndInfLikeCpuBlas) {
  // oneDNN's own relu post-op makes NaN 0; ours (and ONNX's) keeps it.
  for (Activation act : {Activation::kRelu, Activation::kGelu}) {
    SCOPED_TRACE(std::string(matmul::activation_name(act)));
    Case c{2, 7, 33, 5};
    c.bias = true;
    c.act = act;
    Data d = make(c, 110);
    d.a[0] = NAN;                                     // batch 0, row 0: all NaN
    d.a[static_cast<std::size_t>(c.k)] = INFINITY;    // row 1: ±inf by column sign
    d.a[static_cast<std::size_t>(2 * c.k)] = -1e30f;  // row 2: large negative/positive
    Data blas = d;
    blas.p.a.data = blas.a.data(), blas.p.b.data = blas.b.data(), blas.p.c = blas.c.data();
    blas.p.bias = blas.bias.data();
    onednn_gemm(d.p);
    run_gemm("cpu_blas", blas.p);
    for (int64_t j = 0; j < c.n; ++j) EXPECT_TRUE(std::isnan(d.c[static_cast<std::size_t>(j)])) << j;
    for (std::size_t i = 0; i < d.c.size(); ++i) {
      const float x = d.c[i], y = blas.c[i];
      if (std::isnan(y) || std::isinf(y)) {
        EXPECT_EQ(std::isnan(x), std::isnan(y)) << "element " << i << ": " << x << " vs " << y;
        if (std::isinf(y)) EXPECT_EQ(x, y) << "element " << i;
      } else {
        EXPECT_NEAR(x, y, 1e-5 * (1 + std::abs(y))) << "element " << i;
      }
    }
  }
}

TEST_F(OnednnGemm, PrimitiveCacheReusesAndStaysBounded) {
  // The thread count is part of a primitive's key, and on a loaded machine (ctest -j,
  // CI) the contention detector may change it between calls: fixed here.
  set_host_contended_for_testing(0);
  struct Restore {
    ~Restore() { set_host_contended_for_testing(-1); }
  } restore;
  Data d = make(Case{2, 8, 9, 10}, 90);
  onednn_gemm(d.p);
  const std::size_t after_first = onednn_gemm_cache_size();
  for (int i = 0; i < 3; ++i) onednn_gemm(d.p);  // same key: no new primitive
  EXPECT_EQ(onednn_gemm_cache_size(), after_first);
  // More distinct shapes than the cache holds: it keeps the most recent only.
  for (int64_t m = 3; m <= static_cast<int64_t>(kOnednnGemmCacheSize) + 22; ++m) {
    Data s = make(Case{1, m, 3, 2}, 91);
    ASSERT_TRUE(try_onednn_gemm(s.p));
  }
  EXPECT_EQ(onednn_gemm_cache_size(), kOnednnGemmCacheSize);
  // An evicted shape is rebuilt on demand and still right.
  d.c.assign(d.c.size(), -7.f);
  onednn_gemm(d.p);
  expect_matches(Case{2, 8, 9, 10}, d);
}

TEST_F(OnednnGemm, InsideOurPoolsParallelJobs) {
  // Conv tiles call the GEMM from inside parallel_for: each runs
  // single-threaded on its own problem, several threads on one primitive at
  // once (with a B that brgemm copies into its scratchpad); every result must
  // still be right.
  std::vector<Data> ds;
  ds.reserve(16);  // the problems point into each Data's vectors
  const Case c{1, 64, 200, 300, false, false, false, false, 0, true, Activation::kRelu};
  for (unsigned i = 0; i < 16; ++i) ds.push_back(make(c, 100 + i));
  ThreadCap cap(4);
  for (int rep = 0; rep < 3; ++rep) {
    for (Data& d : ds) d.c.assign(d.c.size(), -7.f);
    parallel_for(16, int64_t{1} << 40, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) run_gemm("onednn", ds[static_cast<std::size_t>(i)].p);
    });
    for (const Data& d : ds) expect_matches(c, d);
  }
}

TEST_F(OnednnGemm, ListedFirstAndRegisteredAboveCpuBlas) {
  EXPECT_EQ(gemm_kernel_names().front(), "onednn");
  KernelRegistry reg;
  register_cpu_kernels(reg);
  KernelPtr k = reg.find("matmul", "onednn");
  ASSERT_NE(k, nullptr);
  KernelPtr blas = reg.find("matmul", "cpu_blas");
  ASSERT_NE(blas, nullptr);
  EXPECT_GT(k->def().priority, blas->def().priority);
  OpContext ctx;
  ctx.op = "matmul";
  ctx.node = "mm";
  ctx.inputs = {TensorSpec{DType::kFloat32, {4, 8}, {}}, TensorSpec{DType::kFloat32, {8, 3}, {}}};
  ctx.outputs = {TensorSpec{DType::kFloat32, {4, 3}, {}}};
  EXPECT_TRUE(k->supports(ctx).ok) << k->supports(ctx).detail;
  for (TensorSpec& s : ctx.inputs) s.dtype = DType::kFloat64;
  ctx.outputs[0].dtype = DType::kFloat64;
  const Support s = k->supports(ctx);
  EXPECT_FALSE(s.ok);
  EXPECT_EQ(s.reason_code, reason::kDtypeUnsupported) << s.detail;
}

}  // namespace
}  // namespace xpuruntime::cpu
