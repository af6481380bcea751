// The CPU kernels as a plan step holds them: Kernel::prepare on the real graph::Node
// (typed attributes), then run with TensorArgs. MatMul/Gemm nodes bound to each CPU
// GEMM, a convolution's GEMM chosen through prepare_sub, and register_cpu_kernels.
// References in float64 on random inputs.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/cpu/cpu_kernels.h"
#include "cpu_test_util.h"
#include "backends/cpu/kernels/gemm_call.h"
#include "xpuruntime/error.h"

namespace xpuruntime::cpu {
namespace {

using test::randn;

TensorArg arg(std::vector<float>& v, Shape s) {
  return TensorArg{DType::kFloat32, std::move(s), v.data()};
}

OpContext context_of(const std::string& op, const std::string& node, const KernelArgs& a) {
  OpContext ctx;
  ctx.op = op;
  ctx.node = node;
  for (const TensorArg& t : a.inputs) ctx.inputs.push_back(TensorSpec{t.dtype, t.shape, {}});
  for (const TensorArg& t : a.outputs) ctx.outputs.push_back(TensorSpec{t.dtype, t.shape, {}});
  return ctx;
}

std::vector<std::string> cpu_gemms() {
  return gemm_kernel_names();
}

// out[b, i, j] = sum_k a[b', i, k] * b[b'', k, j] with numpy batch broadcasting of
// rank-3 operands (batch dims given as [batch_a], [batch_b], broadcast to nb).
std::vector<double> batched_ref(const std::vector<float>& a, int64_t ba,
                                const std::vector<float>& b, int64_t bb, int64_t nb, int64_t m,
                                int64_t k, int64_t n) {
  std::vector<double> y(static_cast<std::size_t>(nb * m * n), 0.0);
  for (int64_t t = 0; t < nb; ++t) {
    const int64_t ta = ba == 1 ? 0 : t, tb = bb == 1 ? 0 : t;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t q = 0; q < k; ++q)
          acc += static_cast<double>(a[(ta * m + i) * k + q]) * b[(tb * k + q) * n + j];
        y[(t * m + i) * n + j] = acc;
      }
  }
  return y;
}

TEST(CpuPrepared, RegisterCpuKernelsIsIdempotentPerRegistry) {
  KernelRegistry reg;
  register_cpu_kernels(reg);
  const uint64_t gen = reg.generation();
  register_cpu_kernels(reg);
  EXPECT_EQ(reg.generation(), gen);
  for (const auto& [op, name] :
       std::vector<std::pair<std::string, std::string>>{{"matmul", "cpu_blocked"},
                                                        {"matmul", "cpu_blas"},
                                                        {"conv", "cpu_im2col"},
                                                        {"conv", "cpu_direct"},
                                                        {"add", "cpu"},
                                                        {"fusedelementwise", "cpu"}}) {
    EXPECT_NE(reg.find(op, name), nullptr) << op << "/" << name;
  }
}

TEST(CpuPrepared, MatMulNodeRunsWithTheBoundGemmAndBroadcasts) {
  KernelRegistry reg;
  register_cpu_kernels(reg);
  struct Case {
    int64_t ba, bb, m, k, n;
  };
  // Shared B (one tall GEMM), equal batches (one batched GEMM), shared A.
  for (const Case c : {Case{3, 1, 5, 7, 4}, Case{3, 3, 6, 9, 33}, Case{1, 4, 2, 65, 3}}) {
    const int64_t nb = std::max(c.ba, c.bb);
    auto a = randn(static_cast<std::size_t>(c.ba * c.m * c.k), 11);
    auto b = randn(static_cast<std::size_t>(c.bb * c.k * c.n), 12);
    const auto ref = batched_ref(a, c.ba, b, c.bb, nb, c.m, c.k, c.n);
    for (const std::string& gemm : cpu_gemms()) {
      std::vector<float> y(ref.size(), -1.f);
      KernelArgs args;
      args.inputs = {arg(a, {c.ba, c.m, c.k}), arg(b, {c.bb, c.k, c.n})};
      args.outputs = {arg(y, {nb, c.m, c.n})};
      Node node;
      node.name = "mm";
      node.op_type = "MatMul";
      OpContext ctx = context_of("matmul", "mm", args);
      PrepareContext pc;
      pc.ctx = &ctx;
      pc.node = &node;
      reg.find("matmul", gemm)->prepare(pc)->run(args);
      for (std::size_t i = 0; i < y.size(); ++i)
        ASSERT_NEAR(y[i], ref[i], 1e-4 * (1 + std::abs(ref[i]))) << gemm << " at " << i;
    }
  }
}

TEST(CpuPrepared, MatMulNodeGeneralBroadcastWithFusedBiasAndRelu) {
  KernelRegistry reg;
  register_cpu_kernels(reg);
  // A [2,1,5,7] x B [3,7,4] -> [2,3,5,4]: one GEMM per output batch.
  const int64_t m = 5, k = 7, n = 4;
  auto a = randn(2 * m * k, 21), b = randn(3 * k * n, 22), bias = randn(n, 23);
  for (const std::string& gemm : cpu_gemms()) {
    std::vector<float> y(2 * 3 * m * n);
    KernelArgs args;
    args.inputs = {arg(a, {2, 1, m, k}), arg(b, {3, k, n}), arg(bias, {n})};
    args.outputs = {arg(y, {2, 3, m, n})};
    Node node;
    node.name = "mm";
    node.op_type = "MatMul";
    node.attrs["_bias"] = graph::Attr::of_int(1);
    node.attrs["_act"] = graph::Attr::of_string("Relu");
    OpContext ctx = context_of("matmul", "mm", args);
    PrepareContext pc;
    pc.ctx = &ctx;
    pc.node = &node;
    reg.find("matmul", gemm)->prepare(pc)->run(args);
    for (int64_t i0 = 0; i0 < 2; ++i0)
      for (int64_t i1 = 0; i1 < 3; ++i1)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double acc = bias[j];
            for (int64_t q = 0; q < k; ++q)
              acc += static_cast<double>(a[(i0 * m + i) * k + q]) * b[(i1 * k + q) * n + j];
            const double want = std::max(acc, 0.0);
            ASSERT_NEAR(y[((i0 * 3 + i1) * m + i) * n + j], want, 1e-4 * (1 + std::abs(want)))
                << gemm;
          }
  }
}

TEST(CpuPrepared, GemmNodeTransposesScalesAndBroadcastsC) {
  KernelRegistry reg;
  register_cpu_kernels(reg);
  const int64_t m = 6, k = 9, n = 5;
  auto a = randn(k * m, 31), b = randn(n * k, 32),
       c = randn(m, 33);  // A^T stored [K,M], B^T [N,K], C [M,1]
  for (const std::string& gemm : cpu_gemms()) {
    std::vector<float> y(m * n);
    KernelArgs args;
    args.inputs = {arg(a, {k, m}), arg(b, {n, k}), arg(c, {m, 1})};
    args.outputs = {arg(y, {m, n})};
    Node node;
    node.name = "g";
    node.op_type = "Gemm";
    node.attrs["transA"] = graph::Attr::of_int(1);
    node.attrs["transB"] = graph::Attr::of_int(1);
    node.attrs["alpha"] = graph::Attr::of_float(0.5);
    node.attrs["beta"] = graph::Attr::of_float(-2.0);
    OpContext ctx = context_of("matmul", "g", args);
    PrepareContext pc;
    pc.ctx = &ctx;
    pc.node = &node;
    reg.find("matmul", gemm)->prepare(pc)->run(args);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t q = 0; q < k; ++q) acc += static_cast<double>(a[q * m + i]) * b[j * k + q];
        const double want = 0.5 * acc - 2.0 * c[i];
        ASSERT_NEAR(y[i * n + j], want, 1e-4 * (1 + std::abs(want))) << gemm;
      }
  }
}

TEST(CpuPrepared, PlainGemmIsACpuGemmPreparedThatRunsItsCase) {
  KernelRegistry reg;
  register_cpu_kernels(reg);
  const int64_t m = 13, k = 17, n = 11;
  auto a = randn(m * k, 41), b = randn(k * n, 42);
  const auto ref = batched_ref(a, 1, b, 1, 1, m, k, n);
  for (const std::string& gemm : cpu_gemms()) {
    std::vector<float> y(m * n), z(m * n);
    KernelArgs args;
    args.inputs = {arg(a, {m, k}), arg(b, {k, n})};
    args.outputs = {arg(y, {m, n})};
    OpContext ctx = context_of("matmul", "direct", args);
    PrepareContext pc;
    pc.ctx = &ctx;  // no node: a plain GEMM problem
    PreparedKernelPtr p = reg.find("matmul", gemm)->prepare(pc);
    auto cg = std::dynamic_pointer_cast<const CpuGemmPrepared>(p);
    ASSERT_NE(cg, nullptr) << gemm;
    EXPECT_EQ(cg->gemm(), gemm);
    p->run(args);
    matmul::GemmProblem q;
    q.dtype = DType::kFloat32;
    q.m = m;
    q.n = n;
    q.k = k;
    q.a = {a.data(), k, 1, 0};
    q.b = {b.data(), n, 1, 0};
    q.c = z.data();
    q.c_rs = n;
    cg->run_problem(q);
    for (std::size_t i = 0; i < y.size(); ++i) {
      ASSERT_NEAR(y[i], ref[i], 1e-4 * (1 + std::abs(ref[i]))) << gemm;
      ASSERT_NEAR(z[i], ref[i], 1e-4 * (1 + std::abs(ref[i]))) << gemm;
    }
  }
}

// A 3x3 convolution, stride 1, pad 1, group 2, in float64.
std::vector<double> conv_ref(const std::vector<float>& x, const std::vector<float>& w, int64_t C,
                             int64_t H, int64_t W, int64_t M, int64_t G) {
  const int64_t cg = C / G, mg = M / G;
  std::vector<double> y(static_cast<std::size_t>(M * H * W), 0.0);
  for (int64_t mo = 0; mo < M; ++mo)
    for (int64_t oh = 0; oh < H; ++oh)
      for (int64_t ow = 0; ow < W; ++ow) {
        double acc = 0;
        const int64_t g = mo / mg;
        for (int64_t c = 0; c < cg; ++c)
          for (int64_t kh = 0; kh < 3; ++kh)
            for (int64_t kw = 0; kw < 3; ++kw) {
              const int64_t ih = oh - 1 + kh, iw = ow - 1 + kw;
              if (ih < 0 || iw < 0 || ih >= H || iw >= W) continue;
              acc += static_cast<double>(x[((g * cg + c) * H + ih) * W + iw]) *
                     w[((mo * cg + c) * 3 + kh) * 3 + kw];
            }
        y[(mo * H + oh) * W + ow] = acc;
      }
  return y;
}

Node conv_node(int64_t group) {
  Node n;
  n.name = "conv1";
  n.op_type = "Conv";
  n.attrs["pads"] = graph::Attr::of_ints({1, 1, 1, 1});
  n.attrs["group"] = graph::Attr::of_int(group);
  return n;
}

TEST(CpuPrepared, Im2colConvChoosesItsGemmThroughPrepareSub) {
  KernelRegistry reg;
  register_cpu_kernels(reg);
  const int64_t C = 6, H = 9, W = 7, M = 8, G = 2;
  auto x = randn(C * H * W, 51), w = randn(M * (C / G) * 9, 52);
  const auto ref = conv_ref(x, w, C, H, W, M, G);
  for (const std::string& gemm : cpu_gemms()) {
    std::vector<float> y(ref.size());
    KernelArgs args;
    args.inputs = {arg(x, {1, C, H, W}), arg(w, {M, C / G, 3, 3})};
    args.outputs = {arg(y, {1, M, H, W})};
    Node node = conv_node(G);
    OpContext ctx = context_of("conv", "conv1", args);
    ctx.deterministic = true;
    OpContext seen;
    std::string seen_node;
    PrepareContext pc;
    pc.ctx = &ctx;
    pc.node = &node;
    pc.prepare_sub = [&](OpContext& sub, const graph::Node& sub_node) {
      seen = sub;
      seen_node = sub_node.name;
      PrepareContext spc;
      spc.ctx = &sub;
      spc.node = &sub_node;
      return reg.find(sub.op, gemm)->prepare(spc);
    };
    reg.find("conv", "cpu_im2col")->prepare(pc)->run(args);
    EXPECT_EQ(seen.op, "matmul");
    EXPECT_EQ(seen.node, "conv1/gemm");
    EXPECT_EQ(seen_node, "conv1/gemm");
    EXPECT_TRUE(seen.deterministic);  // the conv's policy settings carry over
    ASSERT_EQ(seen.inputs.size(), 2u);
    EXPECT_EQ(seen.inputs[0].shape, (Shape{M / G, (C / G) * 9}));
    EXPECT_EQ(seen.inputs[1].shape, (Shape{(C / G) * 9, H * W}));
    EXPECT_EQ(seen.outputs.at(0).shape, (Shape{M / G, H * W}));
    for (std::size_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(y[i], ref[i], 1e-4 * (1 + std::abs(ref[i]))) << gemm << " at " << i;
  }
}

TEST(CpuPrepared, Im2colConvRefusesAGemmThatIsNotACpuGemm) {
  KernelRegistry reg;
  register_cpu_kernels(reg);
  KernelDef d;
  d.op = "matmul";
  d.name = "elsewhere";
  auto foreign = std::make_shared<FunctionKernel>(d, [](KernelLaunch&) {});
  std::vector<float> x(2 * 5 * 5), w(4 * 1 * 9), y(4 * 5 * 5);
  KernelArgs args;
  args.inputs = {arg(x, {1, 2, 5, 5}), arg(w, {4, 1, 3, 3})};
  args.outputs = {arg(y, {1, 4, 5, 5})};
  Node node = conv_node(2);
  OpContext ctx = context_of("conv", "conv1", args);
  PrepareContext pc;
  pc.ctx = &ctx;
  pc.node = &node;
  pc.prepare_sub = [&](OpContext& sub, const graph::Node&) {
    PrepareContext spc;
    spc.ctx = &sub;
    return foreign->prepare(spc);
  };
  try {
    reg.find("conv", "cpu_im2col")->prepare(pc);
    FAIL() << "expected UnsupportedOperationError";
  } catch (const UnsupportedOperationError& e) {
    EXPECT_NE(std::string(e.what()).find("conv1/gemm"), std::string::npos) << e.what();
  }
}

TEST(CpuPrepared, OpKernelReadsTheNodesTypedAttributes) {
  KernelRegistry reg;
  register_cpu_kernels(reg);
  auto x = randn(2 * 3 * 4, 61);
  std::vector<float> y(x.size());
  KernelArgs args;
  args.inputs = {arg(x, {2, 3, 4})};
  args.outputs = {arg(y, {4, 2, 3})};
  Node node;
  node.name = "t";
  node.op_type = "Transpose";
  node.attrs["perm"] = graph::Attr::of_ints({2, 0, 1});
  OpContext ctx = context_of("transpose", "t", args);  // no text attributes at all
  PrepareContext pc;
  pc.ctx = &ctx;
  pc.node = &node;
  reg.find("transpose", "cpu")->prepare(pc)->run(args);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) EXPECT_EQ(y[(k * 2 + i) * 3 + j], x[(i * 3 + j) * 4 + k]);
}

}  // namespace
}  // namespace xpuruntime::cpu
