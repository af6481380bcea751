// The matmul op's shared pieces: spec parsing (read_gemm_layout) with its reasons,
// batch flattening, the column-major mapping the cuBLAS/cuBLASLt kernels use
// (executed here by a naive column-major GEMM, so the operand swap, transposes,
// leading dimensions and batch strides are checked without a GPU), the CPU
// kernels' registration, and matmul() through the dispatcher with its cache.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backends/cpu/kernels/matmul/cpu_gemm_impl.h"
#include "backends/cpu/kernels/matmul/cpu_matmul_kernels.h"
#include "ops/matmul/matmul_call.h"
#include "ops/matmul/matmul_op.h"
#include "xpuruntime/dispatcher.h"
#include "xpuruntime/error.h"

namespace xpuruntime::matmul {
namespace {

TensorSpec spec(Shape shape, Shape strides = {}, DType t = DType::kFloat32) {
  return {t, std::move(shape), std::move(strides)};
}

OpContext ctx_of(std::vector<TensorSpec> in, TensorSpec out,
                 std::map<std::string, std::string> attrs = {}) {
  OpContext c;
  c.op = kOpKey;
  c.inputs = std::move(in);
  c.outputs = {std::move(out)};
  c.attrs = std::move(attrs);
  return c;
}

TEST(MatmulOp, ReadsBatchedTransposedAndBroadcastLayouts) {
  GemmLayout l;
  // a (2, 3, 5, 4) with its last two dims transposed; b (4, 6) broadcast over the batch.
  Support s = read_gemm_layout(
      ctx_of({spec({2, 3, 5, 4}, {60, 20, 1, 5}), spec({4, 6})}, spec({2, 3, 5, 6})), &l);
  ASSERT_TRUE(s.ok) << s.detail;
  EXPECT_EQ(l.batch, 6);
  EXPECT_EQ(l.m, 5);
  EXPECT_EQ(l.n, 6);
  EXPECT_EQ(l.k, 4);
  EXPECT_EQ(l.a.rs, 1);
  EXPECT_EQ(l.a.cs, 5);
  EXPECT_EQ(l.a.bs, 20);
  EXPECT_EQ(l.b.bs, 0);
  EXPECT_EQ(l.c_bs, 30);
  EXPECT_EQ(l.activation, Activation::kNone);
}

TEST(MatmulOp, RejectsWithStableReasonCodes) {
  GemmLayout l;
  auto reason_of = [&](OpContext c) { return read_gemm_layout(c, &l).reason_code; };
  EXPECT_EQ(reason_of(ctx_of({spec({3, 4}), spec({5, 6})}, spec({3, 6}))), reason::kShapeUnsupported);
  EXPECT_EQ(reason_of(ctx_of({spec({3, 4}), spec({4, 6})}, spec({3, 7}))), reason::kShapeUnsupported);
  EXPECT_EQ(reason_of(ctx_of({spec({3, 4}, {}, DType::kInt32), spec({4, 6}, {}, DType::kInt32)},
                             spec({3, 6}, {}, DType::kInt32))),
            reason::kDtypeUnsupported);
  EXPECT_EQ(reason_of(ctx_of({spec({3, 4}), spec({4, 6}, {}, DType::kFloat16)}, spec({3, 6}))),
            reason::kDtypeUnsupported);
  EXPECT_EQ(reason_of(ctx_of({spec({3, 4}), spec({4, 6})}, spec({3, 6}), {{"activation", "tanh"}})),
            reason::kAttributeUnsupported);
  EXPECT_EQ(reason_of(ctx_of({spec({3, 4}), spec({4, 6})}, spec({3, 6}), {{"alpha", "2"}})),
            reason::kAttributeUnsupported);
  EXPECT_EQ(reason_of(ctx_of({spec({3, 4}), spec({4, 6}), spec({5})}, spec({3, 6}))),
            reason::kShapeUnsupported);
  // Output broadcast over the batch: every batch would write the same elements.
  EXPECT_EQ(reason_of(ctx_of({spec({2, 3, 4}), spec({2, 4, 6})}, spec({2, 3, 6}, {0, 6, 1}))),
            reason::kLayoutUnsupported);
  // Batch dims one stride cannot walk: (2, 3) batch where a broadcasts the inner dim only.
  EXPECT_EQ(reason_of(ctx_of({spec({2, 1, 3, 4}), spec({1, 3, 4, 6})}, spec({2, 3, 3, 6}))),
            reason::kLayoutUnsupported);
}

TEST(MatmulOp, FlatBatchStride) {
  EXPECT_EQ(flat_batch_stride(Shape{2, 3}, Shape{2, 3, 4, 5}, Shape{60, 20, 5, 1}), 20);
  EXPECT_EQ(flat_batch_stride(Shape{2, 3}, Shape{4, 5}, Shape{5, 1}), 0);
  EXPECT_EQ(flat_batch_stride(Shape{2, 3}, Shape{1, 3, 4, 5}, Shape{60, 20, 5, 1}), std::nullopt);
  EXPECT_EQ(flat_batch_stride(Shape{1, 3}, Shape{1, 3, 4, 5}, Shape{999, 20, 5, 1}), 20);
  EXPECT_EQ(flat_batch_stride(Shape{2, 1, 3}, Shape{2, 1, 3, 4, 5}, Shape{60, 7, 20, 5, 1}), 20);
}

// Executes a ColMajorGemm naively: C'(i, j) = Σ op(X)(i, p)·op(Y)(p, j), column-major.
void run_col_major(const ColMajorGemm& g, int64_t batch, double* c) {
  auto at = [](const ColMajorOperand& o, int64_t r, int64_t col) {
    const double* d = static_cast<const double*>(o.data);
    return o.transpose ? d[col + r * o.ld] : d[r + col * o.ld];
  };
  for (int64_t bi = 0; bi < batch; ++bi) {
    ColMajorOperand x = g.x, y = g.y;
    x.data = static_cast<const double*>(g.x.data) + bi * g.x.batch_stride;
    y.data = static_cast<const double*>(g.y.data) + bi * g.y.batch_stride;
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < g.k; ++p) s += at(x, i, p) * at(y, p, j);
        c[bi * g.c_batch_stride + i + j * g.ldc] = s;
      }
    }
  }
}

TEST(MatmulOp, ColumnMajorMappingComputesTheRowMajorProduct) {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> u(-1, 1);
  for (int trial = 0; trial < 64; ++trial) {
    const int64_t batch = 1 + trial % 3, m = 1 + rng() % 9, n = 1 + rng() % 9, k = 1 + rng() % 9;
    const bool ta = trial & 1, tb = trial & 2, c_col = trial & 4, pad = trial & 8;
    const int64_t lpad = pad ? 3 : 0;
    // a: m×k row-major (rs = k + pad) or column-major (cs = m + pad); same for b, c.
    const int64_t a_rs = ta ? 1 : k + lpad, a_cs = ta ? m + lpad : 1;
    const int64_t b_rs = tb ? 1 : n + lpad, b_cs = tb ? k + lpad : 1;
    const int64_t c_rs = c_col ? 1 : n + lpad, c_cs = c_col ? m + lpad : 1;
    const int64_t a_bs = (ta ? k * (m + lpad) : m * (k + lpad)), b_bs = (tb ? n * (k + lpad) : k * (n + lpad));
    const int64_t c_bs = c_col ? n * (m + lpad) : m * (n + lpad);
    std::vector<double> a(a_bs * batch), b(b_bs * batch), c(c_bs * batch, 0);
    for (auto& v : a) v = u(rng);
    for (auto& v : b) v = u(rng);
    GemmProblem p;
    p.dtype = DType::kFloat64;
    p.batch = batch;
    p.m = m;
    p.n = n;
    p.k = k;
    p.a = {a.data(), a_rs, a_cs, a_bs};
    p.b = {b.data(), b_rs, b_cs, b_bs};
    p.c = c.data();
    p.c_rs = c_rs;
    p.c_cs = c_cs;
    p.c_bs = c_bs;
    auto g = to_col_major(p);
    ASSERT_TRUE(g.has_value());
    if (!c_col) EXPECT_TRUE(g->swapped);  // row-major C runs as Cᵀ = Bᵀ·Aᵀ
    if (c_col && m > 1 && n > 1) EXPECT_FALSE(g->swapped);
    run_col_major(*g, batch, c.data());
    for (int64_t bi = 0; bi < batch; ++bi) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double ref = 0;
          for (int64_t q = 0; q < k; ++q) {
            ref += a[bi * a_bs + i * a_rs + q * a_cs] * b[bi * b_bs + q * b_rs + j * b_cs];
          }
          ASSERT_NEAR(c[bi * c_bs + i * c_rs + j * c_cs], ref, 1e-12)
              << "trial " << trial << " m" << m << " n" << n << " k" << k << " ta" << ta << " tb"
              << tb << " c_col" << c_col;
        }
      }
    }
  }
}

TEST(MatmulOp, ColumnMajorMappingRefusesOperandsWithoutAUnitStride) {
  GemmProblem p;
  p.m = 4;
  p.n = 4;
  p.k = 4;
  p.a = {nullptr, 8, 2, 0};  // every other column: no unit stride
  p.b = {nullptr, 4, 1, 0};
  p.c_rs = 4;
  EXPECT_FALSE(to_col_major(p).has_value());
  p.a = {nullptr, 4, 1, 0};
  EXPECT_TRUE(to_col_major(p).has_value());
}

TEST(MatmulOp, CpuKernelsAreRegisteredWithMetadata) {
  KernelRegistry registry;
  register_cpu_matmul_kernels(registry);
  auto ks = registry.kernels(kOpKey);
  ASSERT_GE(ks.size(), 5u);
  // priority 40, then onednn 30, cpu_gemv 25, cpu_blas 20, cpu_blocked 10
  EXPECT_EQ(ks[0]->def().name, "cpu_packed");
  EXPECT_EQ(ks[1]->def().name, "onednn");
  EXPECT_EQ(ks[2]->def().name, "cpu_gemv");
  EXPECT_EQ(ks[3]->def().name, "cpu_blas");
  EXPECT_EQ(ks[4]->def().name, "cpu_blocked");
  OpContext c = ctx_of({spec({3, 4}), spec({4, 6})}, spec({3, 6}));
  EXPECT_TRUE(KernelRegistry::check(*ks[4], c).ok);
  // cpu_gemv takes one row only, and says so (or that the CPU lacks AVX2).
  const Support gemv = KernelRegistry::check(*ks[2], c);
  EXPECT_FALSE(gemv.ok);
  EXPECT_TRUE(gemv.detail.find("one row") != std::string::npos ||
              gemv.reason_code == reason::kBackendUnavailable)
      << gemv.detail;
  c.device = Device::parse("cuda:0");
  EXPECT_EQ(KernelRegistry::check(*ks[4], c).reason_code, reason::kDeviceMismatch);
}

TEST(MatmulCall, DispatchesRecordsAndReusesTheChoice) {
  clear_matmul_call_cache();
  MatmulArgs args;
  args.a = Tensor::zeros({3, 4}, DType::kFloat32, Device::cpu());
  args.b = Tensor::zeros({4, 5}, DType::kFloat32, Device::cpu());
  for (int i = 0; i < 3; ++i) args.a.data<float>()[i * 4 + i] = 1.0f + i;  // rows of a pick rows of b
  for (int i = 0; i < 20; ++i) args.b.data<float>()[i] = static_cast<float>(i);
  KernelPolicy policy;
  policy.mode = KernelPolicy::Mode::Require;
  policy.set(kOpKey, "cpu_blocked");
  args.policy = &policy;
  const uint64_t before = Dispatcher::instance().log().total_recorded();
  Tensor c;
  for (int i = 0; i < 3; ++i) c = matmul(args);
  EXPECT_EQ(Dispatcher::instance().log().total_recorded(), before + 3);
  EXPECT_EQ(matmul_call_cache_size(), 1u);
  Decision d = last_matmul_decision();
  EXPECT_EQ(d.chosen, "cpu_blocked");
  EXPECT_EQ(d.rule, rule::kPolicyRequire);
  EXPECT_EQ(d.seq, Dispatcher::instance().log().snapshot(1).back().seq);
  // Row i of a is (i+1)·e_i, so row i of c is (i+1)·row i of b.
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) EXPECT_EQ(c.data<float>()[i * 5 + j], (1.0f + i) * (i * 5 + j));
  // Another policy is another cache entry, and its own decision.
  policy.mode = KernelPolicy::Mode::Prefer;
  policy.set(kOpKey, "cpu_blas");
  matmul(args);
  EXPECT_EQ(last_matmul_decision().chosen, cpu_blas_available() ? "cpu_blas" : "cpu_blocked");
  EXPECT_EQ(matmul_call_cache_size(), 2u);
}

TEST(MatmulCall, OneDimensionalOperandsFollowNumpy) {
  MatmulArgs args;
  args.a = Tensor::zeros({3}, DType::kFloat64, Device::cpu());
  args.b = Tensor::zeros({2, 3, 4}, DType::kFloat64, Device::cpu());
  for (int i = 0; i < 3; ++i) args.a.data<double>()[i] = 1.0;
  for (int i = 0; i < 24; ++i) args.b.data<double>()[i] = i;
  Tensor c = matmul(args);
  ASSERT_EQ(c.shape(), (Shape{2, 4}));
  for (int bi = 0; bi < 2; ++bi)
    for (int j = 0; j < 4; ++j)
      EXPECT_EQ(c.data<double>()[bi * 4 + j], (bi * 12 + j) + (bi * 12 + 4 + j) + (bi * 12 + 8 + j));
}

TEST(MatmulCall, ErrorsNameTheProblem) {
  MatmulArgs args;
  args.a = Tensor::zeros({3, 4}, DType::kFloat32, Device::cpu());
  args.b = Tensor::zeros({5, 6}, DType::kFloat32, Device::cpu());
  try {
    matmul(args);
    FAIL() << "mismatched inner dims did not throw";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("[3, 4]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[5, 6]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(matmul_with_kernel("no_such_kernel", args), UnsupportedOperationError);
}

}  // namespace
}  // namespace xpuruntime::matmul
