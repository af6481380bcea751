// The CUDA execution provider (backends/cuda/cuda_provider): small graphs built
// here are compiled for "cuda" and for "cpu", run on both and compared (the CPU
// plan is the reference; the MLP and Gemm tests also check a float64 reference
// computed here). Plus: ONNX MatMul batch broadcasts and Gemm's
// transB/alpha/beta/C on cuBLASLt, plan save/load for cuda, the edge copies
// counted (inputs in, outputs out, nothing else), and an op without a CUDA
// kernel refused at compile. Skips where no CUDA device exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "xpuruntime/device.h"
#include "xpuruntime/error.h"
#include "xpuruntime/graph/compiler.h"
#include "xpuruntime/graph/executor.h"
#include "xpuruntime/provider.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/ops/op_schema.h"
#include "xpuruntime/profiler.h"

namespace xpuruntime::graph {
namespace {

HostTensor randn(Shape s, unsigned seed) {
  HostTensor t = HostTensor::alloc(DType::kFloat32, std::move(s));
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = d(rng);
  return t;
}

HostTensor ints(Shape s, std::vector<int64_t> v) {
  HostTensor t = HostTensor::alloc(DType::kInt64, std::move(s));
  std::copy(v.begin(), v.end(), t.ptr<int64_t>());
  return t;
}

void input(Graph &g, const std::string &name, Shape s) {
  const int id = g.value_id(name);
  g.values[id].dtype = DType::kFloat32;
  g.values[id].dtype_known = true;
  std::vector<Dim> dims;
  for (int64_t d : s) dims.push_back(Dim{d, ""});
  g.values[id].declared = dims;
  g.inputs.push_back(id);
}

void constant(Graph &g, const std::string &name, HostTensor t) {
  g.values[g.value_id(name)].constant = std::move(t);
}

void node(Graph &g, const std::string &op, std::vector<std::string> in,
          std::vector<std::string> out, std::map<std::string, Attr> attrs = {}) {
  Node n;
  n.name = op + "_" + std::to_string(g.nodes.size());
  n.op_type = op;
  for (auto &s : in) n.inputs.push_back(g.value_id(s));
  for (auto &s : out) n.outputs.push_back(g.value_id(s));
  n.attrs = std::move(attrs);
  g.add_node(std::move(n));
}

void outputs(Graph &g, std::vector<std::string> names) {
  for (auto &s : names) g.outputs.push_back(g.find(s));
}

ExecutionPlan compile_for(const Graph &g, const std::string &device) {
  CompileOptions opt;
  opt.device = device;
  return compile(g, opt);
}

// |got - want| <= atol + rtol * |want| everywhere, shapes equal.
void expect_close(const std::vector<HostTensor> &got, const std::vector<HostTensor> &want,
                  double rtol, double atol, const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].shape, want[i].shape) << what << " output " << i;
    ASSERT_EQ(got[i].dtype, want[i].dtype) << what << " output " << i;
    if (got[i].dtype != DType::kFloat32) {
      EXPECT_EQ(std::memcmp(got[i].data, want[i].data, got[i].nbytes()), 0) << what;
      continue;
    }
    for (int64_t k = 0; k < got[i].numel(); ++k) {
      const double g = got[i].ptr<float>()[k], w = want[i].ptr<float>()[k];
      ASSERT_LE(std::abs(g - w), atol + rtol * std::abs(w))
          << what << " output " << i << " element " << k << ": cuda " << g << " cpu " << w;
    }
  }
}

struct Feeds {
  std::vector<std::string> names;
  std::vector<HostTensor> values;
};

// Runs g on cuda and on cpu; returns the cuda outputs after comparing.
std::vector<HostTensor> run_both(const Graph &g, const Feeds &f, double rtol, double atol,
                                 const std::string &what, RunStats *cuda_stats = nullptr) {
  Executor cpu(std::make_shared<ExecutionPlan>(compile_for(g, "cpu")));
  ExecutionPlan plan = compile_for(g, "cuda");
  EXPECT_EQ(plan.header.device, "cuda");
  Executor gpu(std::make_shared<ExecutionPlan>(std::move(plan)));
  auto want = cpu.run(f.names, f.values);
  auto got = gpu.run(f.names, f.values, {}, cuda_stats);
  expect_close(got, want, rtol, atol, what);
  return got;
}

struct CudaProviderTest : ::testing::Test {
  void SetUp() override {
    DeviceManager &dm = DeviceManager::instance();
    if (dm.get_device_count() == 0)
      GTEST_SKIP() << "no CUDA device: " << dm.accelerator_unavailable_reason();
    ASSERT_NE(ProviderRegistry::instance().find("cuda"), nullptr)
        << "the CUDA plugin loaded but registered no execution provider";
  }
};

TEST_F(CudaProviderTest, ProviderDescribesTheCurrentDevice) {
  ProviderPtr p = ProviderRegistry::instance().get("cuda");
  EXPECT_EQ(p->kernel_device(), DeviceKind::named("cuda"));
  EXPECT_TRUE((p->device().kind == DeviceKind::named("cuda")));
  EXPECT_FALSE(p->host_memory());
  const DeviceInfo info = DeviceManager::instance().get_device_info(p->device());
  EXPECT_EQ(p->capability(), info.compute_capability_major * 10 + info.compute_capability_minor);
  // Epilogues form where the cuBLASLt and cuDNN kernels apply them (takes_epilogue).
  EXPECT_TRUE(p->fusions().epilogues);
  ops::Epilogue relu;
  relu.activation_op = "Relu";
  ops::Epilogue sigmoid;
  sigmoid.activation_op = "Sigmoid";
  EXPECT_TRUE(p->takes_epilogue("Conv", relu, DType::kFloat16));
  EXPECT_TRUE(p->takes_epilogue("MatMul", relu, DType::kBFloat16));
  EXPECT_FALSE(p->takes_epilogue("Conv", sigmoid, DType::kFloat16));
  EXPECT_FALSE(p->takes_epilogue("MatMul", relu, DType::kInt32));
  EXPECT_NE(p->graph_ops(), nullptr);
}

TEST_F(CudaProviderTest, ElementwiseChainAndSoftmaxMatchTheCpu) {
  Graph g;
  input(g, "x", {4, 33});
  input(g, "z", {1, 33});
  HostTensor half = HostTensor::alloc(DType::kFloat32, {});
  *half.ptr<float>() = 0.5f;
  constant(g, "half", half);
  node(g, "Mul", {"x", "half"}, {"a"});
  node(g, "Exp", {"a"}, {"e"});
  node(g, "Sigmoid", {"z"}, {"s"});
  node(g, "Add", {"e", "s"}, {"t"});
  node(g, "Tanh", {"t"}, {"u"});
  node(g, "Softmax", {"u"}, {"y"}, {{"axis", Attr::of_int(-1)}});
  outputs(g, {"y", "t"});
  run_both(g, {{"x", "z"}, {randn({4, 33}, 1), randn({1, 33}, 2)}}, 1e-5, 1e-6, "elementwise");
}

// h = relu(x @ w1 + b1) @ w2 + b2 with x [2,3,8] (B shared: one tall GEMM);
// p = x @ y with y [2,8,5] (same batches: one batched GEMM); q = u @ v with u
// [2,1,3,8], v [1,4,8,5] (broadcast batches: a GEMM per batch); r = vec @ w1
// (1-D promotion).
TEST_F(CudaProviderTest, MatMulMlpAndBatchBroadcastsMatchTheCpuAndFloat64) {
  const HostTensor w1 = randn({8, 16}, 3), b1 = randn({16}, 4), w2 = randn({16, 4}, 5),
                   b2 = randn({4}, 6);
  Graph g;
  input(g, "x", {2, 3, 8});
  input(g, "y", {2, 8, 5});
  input(g, "u", {2, 1, 3, 8});
  input(g, "v", {1, 4, 8, 5});
  input(g, "vec", {8});
  constant(g, "w1", w1);
  constant(g, "b1", b1);
  constant(g, "w2", w2);
  constant(g, "b2", b2);
  node(g, "MatMul", {"x", "w1"}, {"m1"});
  node(g, "Add", {"m1", "b1"}, {"a1"});
  node(g, "Relu", {"a1"}, {"r1"});
  node(g, "MatMul", {"r1", "w2"}, {"m2"});
  node(g, "Add", {"m2", "b2"}, {"h"});
  node(g, "MatMul", {"x", "y"}, {"p"});
  node(g, "MatMul", {"u", "v"}, {"q"});
  node(g, "MatMul", {"vec", "w1"}, {"r"});
  outputs(g, {"h", "p", "q", "r"});
  const HostTensor x = randn({2, 3, 8}, 7), y = randn({2, 8, 5}, 8), u = randn({2, 1, 3, 8}, 9),
                   v = randn({1, 4, 8, 5}, 10), vec = randn({8}, 11);
  auto got = run_both(g, {{"x", "y", "u", "v", "vec"}, {x, y, u, v, vec}}, 1e-4, 1e-5, "mlp");
  ASSERT_EQ(got[2].shape, (Shape{2, 4, 3, 5}));
  ASSERT_EQ(got[3].shape, (Shape{16}));
  // float64 reference for the broadcast batch product q.
  const float *U = u.ptr<float>();
  const float *V = v.ptr<float>();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 5; ++c) {
          double acc = 0;
          for (int k = 0; k < 8; ++k)
            acc += double(U[(i * 3 + r) * 8 + k]) * V[(j * 8 + k) * 5 + c];
          const double gq = got[2].ptr<float>()[((i * 4 + j) * 3 + r) * 5 + c];
          ASSERT_NEAR(gq, acc, 1e-4 * (1 + std::abs(acc)));
        }
}

// Y1 = A @ Bᵀ + c_row (alpha = beta = 1: the bias epilogue); Y2 = 0.5·Aᵀ' @ B'
// + 2·c_col (transA, a column C broadcast into Y and accumulated with beta).
TEST_F(CudaProviderTest, GemmTransposesAlphaBetaAndCMatchFloat64) {
  const HostTensor b = randn({6, 7}, 12), crow = randn({6}, 13), b2 = randn({5, 4}, 14),
                   ccol = randn({3, 1}, 15);
  Graph g;
  input(g, "a", {5, 7});
  input(g, "at", {5, 3});
  constant(g, "b", b);
  constant(g, "crow", crow);
  constant(g, "b2", b2);
  constant(g, "ccol", ccol);
  node(g, "Gemm", {"a", "b", "crow"}, {"y1"}, {{"transB", Attr::of_int(1)}});
  node(g, "Gemm", {"at", "b2", "ccol"}, {"y2"},
       {{"transA", Attr::of_int(1)},
        {"alpha", Attr::of_float(0.5f)},
        {"beta", Attr::of_float(2.f)}});
  outputs(g, {"y1", "y2"});
  const HostTensor a = randn({5, 7}, 16), at = randn({5, 3}, 17);
  auto got = run_both(g, {{"a", "at"}, {a, at}}, 1e-4, 1e-5, "gemm");
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 6; ++j) {
      double acc = crow.ptr<float>()[j];
      for (int k = 0; k < 7; ++k)
        acc += double(a.ptr<float>()[i * 7 + k]) * b.ptr<float>()[j * 7 + k];
      ASSERT_NEAR(got[0].ptr<float>()[i * 6 + j], acc, 1e-4 * (1 + std::abs(acc)));
    }
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      double acc = 0;
      for (int k = 0; k < 5; ++k)
        acc += double(at.ptr<float>()[k * 3 + i]) * b2.ptr<float>()[k * 4 + j];
      acc = 0.5 * acc + 2.0 * ccol.ptr<float>()[i];
      ASSERT_NEAR(got[1].ptr<float>()[i * 4 + j], acc, 1e-4 * (1 + std::abs(acc)));
    }
}

TEST_F(CudaProviderTest, LayerNormalizationMatchesTheCpu) {
  Graph g;
  input(g, "x", {3, 10, 64});
  constant(g, "scale", randn({64}, 18));
  constant(g, "bias", randn({64}, 19));
  node(g, "LayerNormalization", {"x", "scale", "bias"}, {"y"},
       {{"axis", Attr::of_int(-1)}, {"epsilon", Attr::of_float(1e-5f)}});
  outputs(g, {"y"});
  run_both(g, {{"x"}, {randn({3, 10, 64}, 20)}}, 1e-4, 1e-5, "layernorm");
}

TEST_F(CudaProviderTest, TransposeReshapeGatherMatchTheCpu) {
  Graph g;
  input(g, "x", {2, 3, 4});
  constant(g, "shape", ints({2}, {3, 8}));
  constant(g, "idx", ints({2}, {2, 0}));
  node(g, "Transpose", {"x"}, {"t"}, {{"perm", Attr::of_ints({1, 0, 2})}});
  node(g, "Reshape", {"t", "shape"}, {"r"});
  node(g, "Gather", {"r", "idx"}, {"y"}, {{"axis", Attr::of_int(0)}});
  outputs(g, {"y", "r"});
  auto got = run_both(g, {{"x"}, {randn({2, 3, 4}, 21)}}, 0, 0, "transpose/reshape/gather");
  EXPECT_EQ(got[0].shape, (Shape{2, 8}));
}

Graph mlp_graph(const HostTensor &w, const HostTensor &b) {
  Graph g;
  input(g, "x", {4, 8});
  constant(g, "w", w);
  constant(g, "b", b);
  node(g, "MatMul", {"x", "w"}, {"m"});
  node(g, "Add", {"m", "b"}, {"a"});
  node(g, "Relu", {"a"}, {"h"});
  node(g, "Softmax", {"h"}, {"y"}, {{"axis", Attr::of_int(-1)}});
  outputs(g, {"y", "h"});
  return g;
}

TEST_F(CudaProviderTest, PlanSavedForCudaReloadsAndGivesTheSameBits) {
  const Graph g = mlp_graph(randn({8, 6}, 22), randn({6}, 23));
  ExecutionPlan plan = compile_for(g, "cuda");
  ExecutionPlan loaded = ExecutionPlan::deserialize(plan.serialize(), PlanExpectation{"cuda", ""});
  EXPECT_EQ(loaded.header.device, "cuda");
  ASSERT_EQ(loaded.steps.size(), plan.steps.size());
  for (std::size_t i = 0; i < plan.steps.size(); ++i)
    EXPECT_EQ(loaded.steps[i].kernel, plan.steps[i].kernel);
  const HostTensor x = randn({4, 8}, 24);
  auto a = Executor(std::make_shared<ExecutionPlan>(plan)).run({"x"}, {x});
  auto c = Executor(std::make_shared<ExecutionPlan>(loaded)).run({"x"}, {x});
  ASSERT_EQ(a.size(), c.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(std::memcmp(a[i].data, c[i].data, a[i].nbytes()), 0) << "same kernels, same bits";
}

TEST_F(CudaProviderTest, OnlyInputsAndOutputsCrossTheHostBoundary) {
  const Graph g = mlp_graph(randn({8, 6}, 25), randn({6}, 26));
  Executor ex(std::make_shared<ExecutionPlan>(compile_for(g, "cuda")));
  const HostTensor x = randn({4, 8}, 27);
  (void)ex.run({"x"}, {x});  // warm-up: cuBLASLt handles and heuristics
  RunStats st;
  Profiler::instance().enable();
  auto got = ex.run({"x"}, {x}, {}, &st);
  const ProfilerCounters pc = Profiler::instance().counters();
  Profiler::instance().disable();
  EXPECT_EQ(st.copies_to_device, 1);
  EXPECT_EQ(st.copies_to_host, 2);
  EXPECT_EQ(st.copy_bytes, static_cast<int64_t>(x.nbytes() + got[0].nbytes() + got[1].nbytes()));
  EXPECT_EQ(pc.copies_h2d, 1u) << "constants stay on the device between runs";
  EXPECT_EQ(pc.copies_d2h, 2u);
}

// An ONNX op the CPU runs and CUDA has no kernel for (picked from the registry,
// so the test follows the kernels as they land); check_supported refuses it
// before any shape is looked at.
TEST_F(CudaProviderTest, OpWithoutACudaKernelFailsAtCompileNamingNodeAndOp) {
  std::string op;
  for (const std::string &t : ops::schema_op_types()) {
    const ops::OpSchema *s = ops::find_schema(t);
    if (s == nullptr || !s->domain.empty()) continue;
    if (!KernelRegistry::instance().list(s->key, DeviceKind::cpu()).empty() &&
        KernelRegistry::instance().list(s->key, DeviceKind::named("cuda")).empty()) {
      op = t;
      break;
    }
  }
  if (op.empty()) GTEST_SKIP() << "every op the CPU runs has a CUDA kernel";
  Graph g;
  input(g, "x", {2, 3});
  node(g, op, {"x"}, {"y"});
  outputs(g, {"y"});
  try {
    compile_for(g, "cuda");
    FAIL() << "op " << op << " compiled for cuda, which has no kernel for it";
  } catch (const UnsupportedOperationError &e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(op + "_0"), std::string::npos) << m;
    EXPECT_NE(m.find("'" + op + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("'cuda'"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace xpuruntime::graph
