// The native engine's C++ pipeline without Python: graph validation, compile
// (passes, dispatch, memory planning), the plan format, and the executor.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <thread>

#include "graph/planner.h"
#include "xpuruntime/error.h"
#include "xpuruntime/graph/compiler.h"
#include "xpuruntime/graph/executor.h"

namespace xpuruntime::graph {
namespace {

HostTensor tensor(Shape s, unsigned seed) {
  HostTensor t = HostTensor::alloc(DType::kFloat32, std::move(s));
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = d(rng);
  return t;
}

int input(Graph& g, const std::string& name, Shape s) {
  int id = g.value_id(name);
  g.values[id].dtype = DType::kFloat32;
  g.values[id].dtype_known = true;
  std::vector<Dim> dims;
  for (int64_t d : s) dims.push_back(Dim{d, ""});
  g.values[id].declared = dims;
  g.inputs.push_back(id);
  return id;
}

int constant(Graph& g, const std::string& name, HostTensor t) {
  int id = g.value_id(name);
  g.values[id].constant = std::move(t);
  return id;
}

void node(Graph& g, const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
          const std::string& name = "") {
  Node n;
  n.name = name.empty() ? op + std::to_string(g.nodes.size()) : name;
  n.op_type = op;
  for (auto& s : in) n.inputs.push_back(g.value_id(s));
  for (auto& s : out) n.outputs.push_back(g.value_id(s));
  g.add_node(std::move(n));
}

// y = relu(x @ w + b)
Graph mlp(HostTensor& w, HostTensor& b) {
  Graph g;
  input(g, "x", {5, 3});
  constant(g, "w", w);
  constant(g, "b", b);
  node(g, "MatMul", {"x", "w"}, {"h"});
  node(g, "Add", {"h", "b"}, {"a"});
  node(g, "Relu", {"a"}, {"y"});
  g.outputs.push_back(g.find("y"));
  return g;
}

TEST(Graph, CompileAndRunMatchesReference) {
  HostTensor w = tensor({3, 4}, 1), b = tensor({4}, 2), x = tensor({5, 3}, 3);
  ExecutionPlan plan = compile(mlp(w, b), CompileOptions{});
  ASSERT_EQ(plan.steps.size(), 1u) << plan.summary();  // bias and relu fused into the MatMul
  Executor ex(std::make_shared<ExecutionPlan>(plan));
  auto out = ex.run({"x"}, {x});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].shape, (Shape{5, 4}));
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 4; ++j) {
      double acc = b.ptr<float>()[j];
      for (int k = 0; k < 3; ++k) acc += static_cast<double>(x.ptr<float>()[i * 3 + k]) * w.ptr<float>()[k * 4 + j];
      EXPECT_NEAR(out[0].ptr<float>()[i * 4 + j], std::max(acc, 0.0), 1e-5);
    }
  EXPECT_FALSE(plan.decisions.empty());
}

TEST(Graph, CycleIsAnInvalidModel) {
  Graph g;
  input(g, "x", {2});
  node(g, "Add", {"x", "b"}, {"a"}, "first");
  node(g, "Relu", {"a"}, {"b"}, "second");
  g.outputs.push_back(g.find("a"));
  try {
    g.validate();
    FAIL() << "no error";
  } catch (const InvalidModelError& e) {
    EXPECT_NE(std::string(e.what()).find("cycle"), std::string::npos) << e.what();
  }
}

TEST(Graph, MissingValueAndUnknownOpAreNamed) {
  Graph g;
  input(g, "x", {2});
  node(g, "Add", {"x", "weights"}, {"y"}, "adder");
  g.outputs.push_back(g.find("y"));
  EXPECT_THROW(g.validate(), InvalidModelError);
  Graph h;
  input(h, "x", {2});
  node(h, "Frobnicate", {"x"}, {"y"}, "mystery");
  h.outputs.push_back(h.find("y"));
  try {
    compile(std::move(h), CompileOptions{});
    FAIL() << "no error";
  } catch (const UnsupportedOperationError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("mystery"), std::string::npos);
    EXPECT_NE(m.find("Frobnicate"), std::string::npos);
  }
}

TEST(Graph, NodeSupportAnswersPerNodeWithReasonCodes) {
  // The orchestrator's native capability: every node, in order, with a reason code.
  Graph g;
  input(g, "x", {2});
  constant(g, "two", tensor({2}, 3));
  node(g, "Add", {"two", "two"}, {"four"}, "folded");
  node(g, "Relu", {"x"}, {"r"}, "relu");
  node(g, "Frobnicate", {"r"}, {"f"}, "mystery");
  Node ms;
  ms.name = "ms_gelu";
  ms.op_type = "Gelu";
  ms.domain = "com.microsoft";
  ms.inputs = {g.find("f")};
  ms.outputs = {g.value_id("y")};
  g.add_node(std::move(ms));
  g.outputs = {g.find("y"), g.find("four")};
  const std::vector<NodeSupport> s = node_support(g, "cpu");
  ASSERT_EQ(s.size(), 4u);
  std::map<std::string, NodeSupport> by;
  for (const NodeSupport& x : s) by[x.node] = x;
  EXPECT_TRUE(by["folded"].supported && by["folded"].folds);
  EXPECT_TRUE(by["relu"].supported && !by["relu"].kernels.empty() && by["relu"].reason_code.empty());
  EXPECT_FALSE(by["mystery"].supported);
  EXPECT_EQ(by["mystery"].reason_code, "op_unsupported");
  EXPECT_EQ(by["ms_gelu"].reason_code, "op_unsupported");
  EXPECT_NE(by["ms_gelu"].detail.find("com.microsoft"), std::string::npos) << by["ms_gelu"].detail;
}

TEST(Graph, MemoryPlanReusesAndNeverOverlapsLiveBuffers) {
  Graph g;
  input(g, "x", {1000});
  std::string prev = "x";
  for (int i = 0; i < 12; ++i) {
    const std::string out = "v" + std::to_string(i);
    node(g, i % 2 ? "Sqrt" : "Abs", {prev}, {out});  // no fusion across a chain of different ops? force it off
    prev = out;
  }
  g.outputs.push_back(g.find(prev));
  CompileOptions o;
  o.fuse = false;
  ExecutionPlan p = compile(std::move(g), o);
  EXPECT_LT(p.memory.arena_bytes, p.memory.intermediate_bytes);
  EXPECT_GT(p.memory.arena_bytes, 0);
  // The chain of elementwise ops runs in place: one 4000-byte buffer (64-byte aligned).
  EXPECT_EQ(p.memory.arena_bytes, 4032);
  // Lifetimes: value v lives from its producing step to last_use.
  std::vector<int> def(p.values.size(), -1);
  for (std::size_t s = 0; s < p.steps.size(); ++s)
    for (int o2 : p.steps[s].node.outputs) def[o2] = static_cast<int>(s);
  for (std::size_t a = 0; a < p.values.size(); ++a)
    for (std::size_t b = a + 1; b < p.values.size(); ++b) {
      const PlanValue &va = p.values[a], &vb = p.values[b];
      if (va.arena_offset < 0 || vb.arena_offset < 0) continue;
      const bool live = !(va.last_use < def[b] || vb.last_use < def[a]);
      const bool disjoint = va.arena_offset + 4000 <= vb.arena_offset || vb.arena_offset + 4000 <= va.arena_offset;
      // In place (inplace_input): the step defining b writes over a, whose last use it is.
      const bool in_place = va.arena_offset == vb.arena_offset && va.last_use == def[b] &&
                            inplace_input(p, static_cast<std::size_t>(def[b])) == static_cast<int>(a);
      EXPECT_TRUE(!live || disjoint || in_place) << va.name << " and " << vb.name << " overlap while both live";
    }
  HostTensor x = tensor({1000}, 5);
  Executor ex(std::make_shared<ExecutionPlan>(p));
  auto out = ex.run({"x"}, {x});
  for (int i = 0; i < 1000; ++i) {
    double v = x.ptr<float>()[i];
    for (int k = 0; k < 12; ++k) v = k % 2 ? std::sqrt(v) : std::abs(v);
    EXPECT_NEAR(out[0].ptr<float>()[i], v, 1e-5);
  }
}

TEST(Graph, PlanRoundTripsAndRefusesDamage) {
  HostTensor w = tensor({3, 4}, 1), b = tensor({4}, 2), x = tensor({5, 3}, 3);
  CompileOptions o;
  o.model_hash = "abc";
  ExecutionPlan plan = compile(mlp(w, b), o);
  const std::string bytes = plan.serialize();
  ExecutionPlan back = ExecutionPlan::deserialize(bytes, PlanExpectation{"cpu", plan.header.policy_fingerprint});
  EXPECT_EQ(back.header.model_hash, "abc");
  auto y1 = Executor(std::make_shared<ExecutionPlan>(plan)).run({"x"}, {x});
  auto y2 = Executor(std::make_shared<ExecutionPlan>(back)).run({"x"}, {x});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(y1[0].ptr<float>()[i], y2[0].ptr<float>()[i]);
  for (std::size_t cut : {std::size_t{3}, std::size_t{20}, bytes.size() / 2, bytes.size() - 1})
    EXPECT_THROW(ExecutionPlan::deserialize(bytes.substr(0, cut)), InvalidModelError) << cut;
  EXPECT_THROW(ExecutionPlan::deserialize(bytes, PlanExpectation{"cuda:0", ""}), InvalidModelError);
  EXPECT_THROW(ExecutionPlan::deserialize(bytes, PlanExpectation{"", "0000"}), InvalidModelError);
  std::string garbage = bytes;
  for (std::size_t i = 20; i < 60 && i < garbage.size(); ++i) garbage[i] = '#';
  EXPECT_THROW(ExecutionPlan::deserialize(garbage), InvalidModelError);
}

TEST(Graph, ExecutorRejectsBadInputsAndIsThreadSafe) {
  HostTensor w = tensor({3, 4}, 1), b = tensor({4}, 2), x = tensor({5, 3}, 3);
  auto plan = std::make_shared<ExecutionPlan>(compile(mlp(w, b), CompileOptions{}));
  Executor ex(plan);
  EXPECT_THROW(ex.run({"nope"}, {x}), InvalidArgumentError);
  EXPECT_THROW(ex.run({}, {}), InvalidArgumentError);
  EXPECT_THROW(ex.run({"x"}, {tensor({5, 4}, 1)}), InvalidArgumentError);
  EXPECT_THROW(ex.run({"x"}, {x}, {"zzz"}), InvalidArgumentError);
  const auto ref = ex.run({"x"}, {x});
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        auto y = ex.run({"x"}, {x});
        for (int k = 0; k < 20; ++k)
          if (y[0].ptr<float>()[k] != ref[0].ptr<float>()[k]) ++bad;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace xpuruntime::graph
