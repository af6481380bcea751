// The typed descriptions the compiler writes onto nodes: ops::Epilogue (bias,
// residual, activation of Conv/MatMul/Gemm) and ops::ElementwiseProgram (fused
// chains). Round trips through node attributes, malformed attributes as typed
// errors, and the fusion pass building a program the CPU kernel runs correctly.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/cpu/cpu_kernels.h"
#include "graph/passes.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/elementwise_program.h"
#include "xpuruntime/ops/epilogue.h"

namespace xpuruntime::ops {
namespace {

using graph::Attr;
using graph::Node;

Node op(const std::string& type, const std::string& name = "n") {
  Node n;
  n.op_type = type;
  n.name = name;
  return n;
}

TEST(OpEpilogue, ActivationRoundTripsThroughTheNodeAttributes) {
  Node leaky = op("LeakyRelu");
  leaky.attrs["alpha"] = Attr::of_float(0.3);
  Epilogue e;
  e.bias = true;
  ASSERT_TRUE(Epilogue::activation_of(leaky, -INFINITY, INFINITY, e));
  Node mm = op("MatMul", "mm");
  e.to_attrs(mm.attrs);
  // The attribute names plan files and decision logs already carry.
  for (const char* a : {"_bias", "_act", "_lo", "_hi", "_alpha", "_beta"})
    EXPECT_TRUE(mm.has(a)) << a;
  EXPECT_FALSE(mm.has("_sum"));
  EXPECT_FALSE(mm.has("_approximate"));
  const Epilogue back = Epilogue::from_node(mm);
  EXPECT_TRUE(back.bias);
  EXPECT_FALSE(back.residual);
  EXPECT_EQ(back.activation_op, "LeakyRelu");
  EXPECT_EQ(back.activation, Unary::kLeakyRelu);
  EXPECT_DOUBLE_EQ(back.params.alpha, 0.3);

  Node gelu = op("Gelu");
  gelu.attrs["approximate"] = Attr::of_string("tanh");
  Epilogue g;
  ASSERT_TRUE(Epilogue::activation_of(gelu, -INFINITY, INFINITY, g));
  Node cv = op("Conv", "cv");
  g.residual = true;
  g.to_attrs(cv.attrs);
  const Epilogue gb = Epilogue::from_node(cv);
  EXPECT_EQ(gb.activation, Unary::kGeluTanh);
  EXPECT_TRUE(gb.residual);
  EXPECT_EQ(cv.attr_str("_approximate", ""), "tanh");

  Epilogue clip;
  ASSERT_TRUE(Epilogue::activation_of(op("Clip"), 0.0, 6.0, clip));
  EXPECT_EQ(clip.activation, Unary::kClip);
  EXPECT_DOUBLE_EQ(clip.params.hi, 6.0);
  Epilogue none;
  EXPECT_FALSE(Epilogue::activation_of(op("Exp"), 0, 0, none));  // not an epilogue activation
  EXPECT_TRUE(none.empty());
  EXPECT_TRUE(Epilogue::from_node(op("MatMul")).empty());
}

TEST(OpEpilogue, UnknownActivationIsATypedErrorNamingTheNode) {
  Node n = op("Conv", "conv7");
  n.attrs["_act"] = Attr::of_string("Frobnicate");
  try {
    Epilogue::from_node(n);
    FAIL() << "expected InvalidModelError";
  } catch (const InvalidModelError& e) {
    EXPECT_NE(std::string(e.what()).find("conv7"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Frobnicate"), std::string::npos) << e.what();
  }
}

TEST(OpElementwiseProgram, RoundTripsAndRejectsMalformedPrograms) {
  ElementwiseProgram p;
  ElementwiseInstr a;
  a.kind = ElementwiseInstr::Kind::kBinaryOperandLeft;
  a.binary = FusedBin::kSub;
  a.operand = 1;
  ElementwiseInstr b;
  b.unary = Unary::kClip;
  b.params.lo = -1;
  b.params.hi = 2;
  p.instrs = {a, b};
  p.ops = "Sub,Clip";
  Node n = op("FusedElementwise", "f");
  n.inputs = {0, 1};
  p.to_attrs(n.attrs);
  const ElementwiseProgram q = ElementwiseProgram::from_node(n);
  ASSERT_EQ(q.instrs.size(), 2u);
  EXPECT_EQ(q.instrs[0].kind, ElementwiseInstr::Kind::kBinaryOperandLeft);
  EXPECT_EQ(q.instrs[0].binary, FusedBin::kSub);
  EXPECT_EQ(q.instrs[0].operand, 1);
  EXPECT_EQ(q.instrs[1].kind, ElementwiseInstr::Kind::kUnary);
  EXPECT_EQ(q.instrs[1].unary, Unary::kClip);
  EXPECT_DOUBLE_EQ(q.instrs[1].params.hi, 2.0);
  EXPECT_EQ(q.ops, "Sub,Clip");

  auto broken = [&](std::vector<int64_t> prog, std::size_t params) {
    Node m = n;
    m.attrs["_prog"] = Attr::of_ints(std::move(prog));
    m.attrs["_params"] = Attr::of_floats(std::vector<double>(params, 0.0));
    EXPECT_THROW(ElementwiseProgram::from_node(m), InvalidModelError);
  };
  broken({0, 1}, 4);                                    // not 3 ints per instruction
  broken({0, 1, -1}, 3);                                // not 4 floats per instruction
  broken({7, 1, -1}, 4);                                // unknown kind
  broken({0, 200, -1}, 4);                              // unknown unary code
  broken({1, static_cast<int>(FusedBin::kAdd), 5}, 4);  // operand beyond the inputs
  broken({1, 99, 1}, 4);                                // unknown binary code
}

// x -> Div(sqrt 2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5): BERT's GELU. The fusion
// pass builds one FusedElementwise whose program the CPU kernel runs to the float64
// GELU.
TEST(OpElementwiseProgram, FusionBuildsAProgramTheCpuKernelRuns) {
  graph::Graph g;
  auto scalar = [&](const std::string& name, float v) {
    graph::HostTensor t = graph::HostTensor::alloc(DType::kFloat32, {});
    *t.ptr<float>() = v;
    const int id = g.value_id(name);
    g.values[id].constant = t;
    g.values[id].shape = graph::Shape{};
    g.values[id].dtype_known = true;
  };
  scalar("sqrt2", 1.41421356f);
  scalar("one", 1.0f);
  scalar("half", 0.5f);
  const int64_t len = 1003;
  const int x = g.value_id("x");
  g.values[x].shape = graph::Shape{len};
  g.values[x].dtype_known = true;
  g.inputs.push_back(x);
  auto add = [&](const std::string& type, std::vector<std::string> in, const std::string& out) {
    Node n = op(type, out);
    for (auto& s : in) n.inputs.push_back(g.value_id(s));
    n.outputs.push_back(g.value_id(out));
    g.add_node(std::move(n));
  };
  add("Div", {"x", "sqrt2"}, "d");
  add("Erf", {"d"}, "e");
  add("Add", {"e", "one"}, "a");
  add("Mul", {"x", "a"}, "m");
  add("Mul", {"m", "half"}, "y");
  g.outputs.push_back(g.value_id("y"));
  graph::passes::infer_and_fold(g, true);
  ASSERT_EQ(graph::passes::fuse_elementwise(g), 1);
  ASSERT_EQ(g.nodes.size(), 1u);
  const Node& f = g.nodes[0];
  EXPECT_EQ(f.op_type, "FusedElementwise");
  const ElementwiseProgram p = ElementwiseProgram::from_node(f);
  EXPECT_EQ(p.ops, "Div,Erf,Add,Mul,Mul");
  ASSERT_EQ(p.instrs.size(), 5u);
  EXPECT_EQ(p.instrs[1].unary, Unary::kErf);
  EXPECT_EQ(p.instrs[3].kind, ElementwiseInstr::Kind::kBinaryOperandLeft);  // x * acc
  EXPECT_EQ(p.instrs[3].operand, 0);

  KernelRegistry reg;
  register_cpu_kernels(reg);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist;
  std::vector<float> xs(len), ys(len);
  for (float& v : xs) v = 3 * dist(rng);
  KernelArgs args;
  for (int i : f.inputs) {
    const graph::Value& v = g.values[i];
    void* data = v.constant.defined() ? v.constant.data : xs.data();
    args.inputs.push_back(
        TensorArg{DType::kFloat32, v.constant.defined() ? v.constant.shape : *v.shape, data});
  }
  args.outputs = {TensorArg{DType::kFloat32, {len}, ys.data()}};
  OpContext ctx;
  ctx.op = "fusedelementwise";
  PrepareContext pc;
  pc.ctx = &ctx;
  pc.node = &f;
  reg.find("fusedelementwise", "cpu")->prepare(pc)->run(args);
  for (int64_t i = 0; i < len; ++i) {
    const double ref = 0.5 * xs[i] * (1.0 + std::erf(xs[i] / std::sqrt(2.0)));
    ASSERT_NEAR(ys[i], ref, 3e-6 * (1 + std::abs(ref))) << i;
  }
}

}  // namespace
}  // namespace xpuruntime::ops
