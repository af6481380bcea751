// GEMM kernel cpu_packed (backends/cpu/kernels/matmul/cpu_gemm_packed.h): packed B against a
// float64 reference on odd shapes (partial row tiles and column panels, several K
// blocks), transposed operands, batches, bias and activations; which packed copy serves
// which problem; and the registry kernel's refusals with their reasons.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/kernels/matmul/cpu_gemm_packed.h"
#include "backends/cpu/kernels/matmul/cpu_matmul_kernels.h"
#include "ops/matmul/matmul_op.h"
#include "xpuruntime/error.h"

using namespace xpuruntime;
using namespace xpuruntime::matmul;

namespace {

std::vector<float> rand_vec(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// C[b] = act(A[b] B + bias) in float64, A and B read through p's strides.
std::vector<double> reference(const GemmProblem& p) {
  const auto* a = static_cast<const float*>(p.a.data);
  const auto* b = static_cast<const float*>(p.b.data);
  const auto* bias = static_cast<const float*>(p.bias);
  std::vector<double> c(static_cast<std::size_t>(p.batch * p.m * p.n));
  for (int64_t bi = 0; bi < p.batch; ++bi)
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        double s = bias ? bias[j] : 0.0;
        for (int64_t k = 0; k < p.k; ++k)
          s += double(a[bi * p.a.bs + i * p.a.rs + k * p.a.cs]) *
               b[bi * p.b.bs + k * p.b.rs + j * p.b.cs];
        if (p.activation == Activation::kRelu) s = s < 0 ? 0 : s;
        if (p.activation == Activation::kGelu)
          s = 0.5 * s * (1 + std::tanh(0.7978845608028654 * (s + 0.044715 * s * s * s)));
        c[(bi * p.m + i) * p.n + j] = s;
      }
  return c;
}

// |c - ref| <= 1e-6 * sqrt(K) * max|ref| (fp32 rounding grows about as sqrt(K)).
void expect_close(const GemmProblem& p, const std::vector<double>& ref) {
  double peak = 1e-30, worst = 0;
  for (double r : ref) peak = std::max(peak, std::abs(r));
  const auto* c = static_cast<const float*>(p.c);
  for (int64_t bi = 0; bi < p.batch; ++bi)
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j)
        worst = std::max(worst,
                         std::abs(c[bi * p.c_bs + i * p.c_rs + j] - ref[(bi * p.m + i) * p.n + j]));
  EXPECT_LE(worst, 1e-6 * std::sqrt(double(std::max<int64_t>(p.k, 1))) * peak)
      << p.m << "x" << p.k << "x" << p.n << " batch " << p.batch;
}

struct Case {
  int64_t batch, m, k, n;
  bool ta, tb;
  Activation act;
};

class CpuGemmPacked : public ::testing::TestWithParam<Case> {};

TEST_P(CpuGemmPacked, MatchesFloat64PackedOnceAndPerCall) {
  if (!cpu_gemm_packed_available()) GTEST_SKIP() << "no AVX-512F on this CPU";
  const Case t = GetParam();
  std::vector<float> a = rand_vec(t.batch * t.m * t.k, 1), b = rand_vec(t.k * t.n, 2),
                     bias = rand_vec(t.n, 3);
  std::vector<float> c(t.batch * t.m * t.n, -7.f);
  GemmProblem p;
  p.batch = t.batch;
  p.m = t.m, p.k = t.k, p.n = t.n;
  // transA: each batch stored K x M; transB: stored N x K (a Gemm's transB weights)
  p.a = t.ta ? MatrixRef{a.data(), 1, t.m, t.m * t.k} : MatrixRef{a.data(), t.k, 1, t.m * t.k};
  p.b = t.tb ? MatrixRef{b.data(), 1, t.k, 0} : MatrixRef{b.data(), t.n, 1, 0};
  p.c = c.data();
  p.c_rs = t.n, p.c_bs = t.m * t.n;
  p.bias = bias.data();
  p.activation = t.act;
  const std::vector<double> ref = reference(p);
  auto packed = PackedB::pack(p.b, t.k, t.n);
  EXPECT_TRUE(packed->serves(p));
  EXPECT_EQ(packed->panels(), (t.n + kPackedNr - 1) / kPackedNr);
  cpu_gemm_packed_run(p, *packed);
  expect_close(p, ref);
  std::fill(c.begin(), c.end(), -7.f);
  cpu_gemm_packed(p);
  expect_close(p, ref);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CpuGemmPacked,
    ::testing::Values(Case{1, 1, 1, 1, false, false, Activation::kNone},
                      Case{1, 7, 33, 65, false, false, Activation::kRelu},
                      Case{1, 33, 129, 7, false, true, Activation::kNone},
                      Case{1, 129, 7, 200, true, false, Activation::kGelu},
                      Case{1, 13, 2049, 64, false, true, Activation::kNone},  // three K blocks
                      Case{2, 17, 96, 130, false, false,
                           Activation::kRelu},  // batches: one tall problem
                      Case{3, 9, 40, 70, true, true, Activation::kNone},  // batches one by one
                      Case{1, 600, 48, 90, false, false, Activation::kNone}));  // tall: row blocks

TEST(CpuGemmPackedServes, OnlyTheOperandItWasPackedFrom) {
  if (!cpu_gemm_packed_available()) GTEST_SKIP() << "no AVX-512F on this CPU";
  std::vector<float> b = rand_vec(24 * 10, 4), other(24 * 10);
  auto packed = PackedB::pack(MatrixRef{b.data(), 10, 1, 0}, 24, 10);
  GemmProblem p;
  p.m = 5, p.k = 24, p.n = 10;
  p.b = {b.data(), 10, 1, 0};
  EXPECT_TRUE(packed->serves(p));
  p.b.data = other.data();
  EXPECT_FALSE(packed->serves(p));
  p.b = {b.data(), 1, 24, 0};  // same bytes read transposed
  EXPECT_FALSE(packed->serves(p));
  p.b = {b.data(), 10, 1, 240};  // a B per batch
  p.batch = 2;
  EXPECT_FALSE(packed->serves(p));
  p.batch = 1;
  p.b = {b.data(), 10, 1, 0};
  p.n = 9;
  EXPECT_FALSE(packed->serves(p));
  p.n = 10;
  p.dtype = DType::kFloat64;
  EXPECT_FALSE(packed->serves(p));
}

TEST(CpuGemmPackedServes, SharedCopyPerOperandWhileHeld) {
  if (!cpu_gemm_packed_available()) GTEST_SKIP() << "no AVX-512F on this CPU";
  std::vector<float> b = rand_vec(16 * 16, 5);
  auto one = PackedB::pack_shared(MatrixRef{b.data(), 16, 1, 0}, 16, 16);
  auto two = PackedB::pack_shared(MatrixRef{b.data(), 16, 1, 0}, 16, 16);
  EXPECT_EQ(one.get(), two.get());  // ALBERT's layers sharing one weight share one copy
  auto transposed = PackedB::pack_shared(MatrixRef{b.data(), 1, 16, 0}, 16, 16);
  EXPECT_NE(transposed.get(), one.get());
  EXPECT_NE(transposed->panel(0)[1], one->panel(0)[1]);  // b[0][1] vs b[1][0]
}

TEST(CpuGemmPackedRejection, SaysWhy) {
  GemmProblem p;
  p.m = 4, p.k = 8, p.n = 16;
  p.c_rs = 32;
  p.c_cs = 2;
  const GemmRejection r = cpu_gemm_packed_rejection(p);
  ASSERT_TRUE(r);
  if (cpu_gemm_packed_available()) {
    EXPECT_EQ(r.kind, GemmRejection::Kind::kLayout);
    EXPECT_NE(r.detail.find("contiguous"), std::string::npos) << r.detail;
    p.c_cs = 1;
    p.dtype = DType::kFloat16;
    EXPECT_EQ(cpu_gemm_packed_rejection(p).kind, GemmRejection::Kind::kDtype);
  }
  EXPECT_THROW(PackedB::pack(MatrixRef{nullptr, 8, 1, 0}, 8, 16), InvalidArgumentError);
}

OpContext ctx_of(Shape a, Shape b, bool b_constant) {
  OpContext c;
  c.op = kOpKey;
  c.inputs = {TensorSpec{DType::kFloat32, std::move(a), {}},
              TensorSpec{DType::kFloat32, std::move(b), {}}};
  c.outputs = {TensorSpec{DType::kFloat32, {c.inputs[0].shape[0], c.inputs[1].shape[1]}, {}}};
  if (b_constant) c.attrs[kBConstantAttr] = "1";
  return c;
}

TEST(CpuGemmPackedKernel, TakesPlanConstantWeightsOnly) {
  KernelRegistry registry;
  register_cpu_matmul_kernels(registry);
  const auto ks = registry.kernels(kOpKey);
  auto it = std::find_if(ks.begin(), ks.end(),
                         [](const auto& kk) { return kk->def().name == "cpu_packed"; });
  ASSERT_NE(it, ks.end());
  const auto& k = *it;
  EXPECT_GT(k->def().priority, 30) << "above onednn";
  // b_constant is a hint every matmul kernel's parser accepts.
  GemmLayout l;
  EXPECT_TRUE(read_gemm_layout(ctx_of({16, 8}, {8, 32}, true), &l).ok);
  if (!cpu_gemm_packed_available()) {
    EXPECT_EQ(KernelRegistry::check(*k, ctx_of({16, 8}, {8, 32}, true)).reason_code,
              reason::kBackendUnavailable);
    return;
  }
  EXPECT_TRUE(KernelRegistry::check(*k, ctx_of({16, 8}, {8, 32}, true)).ok);
  const Support direct = KernelRegistry::check(*k, ctx_of({16, 8}, {8, 32}, false));
  EXPECT_EQ(direct.reason_code, reason::kShapeUnsupported);
  EXPECT_NE(direct.detail.find("constant"), std::string::npos) << direct.detail;
  const Support gemv = KernelRegistry::check(*k, ctx_of({1, 8}, {8, 32}, true));
  EXPECT_NE(gemv.detail.find("matrix-vector"), std::string::npos) << gemv.detail;
}

}  // namespace
