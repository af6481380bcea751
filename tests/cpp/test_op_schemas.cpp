// Device-neutral op schemas (cpp/src/ops/): the table agrees with the registered
// CPU kernels, shape inference against hand-computed references and malformed
// nodes, and constant folding through the KernelRegistry's CPU kernels.
#include <gtest/gtest.h>

#include <random>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/kernels/cpu_op.h"
#include "graph/passes.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/op_schema.h"

namespace xpuruntime::ops {
namespace {

Meta known(DType t, Shape s) {
  return out_meta(t, std::move(s));
}

Node node(const std::string& op, const std::string& name = "n") {
  Node n;
  n.op_type = op;
  n.name = name;
  return n;
}

std::vector<Meta> infer(const Node& n, const std::vector<Meta>& in, std::size_t outputs = 1) {
  const OpSchema* s = find_schema(n.op_type);
  EXPECT_NE(s, nullptr) << n.op_type;
  std::vector<Meta> out(outputs);
  if (s) EXPECT_TRUE(s->infer(n, in, out)) << n.op_type;
  return out;
}

TEST(OpSchemas, EveryCpuKernelHasASchemaAndEverySchemaAKernel) {
  KernelRegistry reg;
  register_cpu_kernels(reg);
  for (const std::string& t : schema_op_types()) {
    const OpSchema* s = find_schema(t);
    ASSERT_NE(s, nullptr) << t;
    EXPECT_EQ(s->op_type, t);
    EXPECT_EQ(s->key, op_key(t));
    EXPECT_TRUE(static_cast<bool>(s->infer)) << t;
    EXPECT_FALSE(s->description.empty()) << t;
    EXPECT_FALSE(reg.kernels(s->key).empty()) << t << " has no CPU kernel under key " << s->key;
    // MatMul/Gemm run through the matmul kernels' prepare(); every other op has OpDefs.
    EXPECT_EQ(cpu::op_defs(t).empty(), s->key == "matmul") << t;
    for (const cpu::OpDef* d : cpu::op_defs(t)) EXPECT_EQ(d->key, s->key) << t;
  }
  for (const std::string& t : cpu::supported_op_types()) EXPECT_NE(find_schema(t), nullptr) << t;
  EXPECT_EQ(find_schema("NoSuchOp"), nullptr);
}

TEST(OpSchemas, KeysAliasesAndFoldability) {
  EXPECT_EQ(op_key("Conv"), "conv");
  EXPECT_EQ(op_key("Gemm"), "matmul");
  EXPECT_EQ(op_key("MatMul"), "matmul");
  EXPECT_EQ(op_key("LayerNormalization"), "layernorm");
  EXPECT_EQ(op_key("ReduceSum"), "reducesum");
  for (const char* t : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"})
    EXPECT_TRUE(find_schema(t)->alias) << t;
  EXPECT_FALSE(find_schema("Transpose")->alias);
  EXPECT_FALSE(find_schema("FusedElementwise")->foldable);
  EXPECT_EQ(find_schema("FusedElementwise")->domain, "xrt");
  EXPECT_TRUE(find_schema("Add")->foldable);
}

TEST(OpSchemas, ConvPoolMatMulGemmShapes) {
  Node c = node("Conv");
  c.attrs["strides"] = graph::Attr::of_ints({2, 1});
  c.attrs["pads"] = graph::Attr::of_ints({1, 0, 1, 0});
  c.attrs["group"] = graph::Attr::of_int(2);
  // H: (11 + 2 - 3) / 2 + 1 = 6; W: (9 - 3) / 1 + 1 = 7.
  auto o = infer(c, {known(DType::kFloat32, {2, 4, 11, 9}), known(DType::kFloat32, {6, 2, 3, 3})});
  EXPECT_EQ(*o[0].shape, (Shape{2, 6, 6, 7}));
  Node p = node("MaxPool");
  p.attrs["kernel_shape"] = graph::Attr::of_ints({3, 3});
  p.attrs["strides"] = graph::Attr::of_ints({2, 2});
  p.attrs["ceil_mode"] = graph::Attr::of_int(1);
  o = infer(p, {known(DType::kFloat32, {1, 3, 8, 8})});
  EXPECT_EQ(*o[0].shape, (Shape{1, 3, 4, 4}));  // ceil((8 - 3) / 2) + 1
  o = infer(node("MatMul"),
            {known(DType::kFloat32, {2, 1, 5, 7}), known(DType::kFloat32, {3, 7, 4})});
  EXPECT_EQ(*o[0].shape, (Shape{2, 3, 5, 4}));
  o = infer(node("MatMul"), {known(DType::kFloat32, {7}), known(DType::kFloat32, {7, 4})});
  EXPECT_EQ(*o[0].shape, (Shape{4}));
  Node g = node("Gemm");
  g.attrs["transA"] = graph::Attr::of_int(1);
  o = infer(g, {known(DType::kFloat64, {9, 6}), known(DType::kFloat64, {9, 5})});
  EXPECT_EQ(*o[0].shape, (Shape{6, 5}));
  EXPECT_EQ(o[0].dtype, DType::kFloat64);
}

TEST(OpSchemas, ComparisonsGiveBoolAndReshapeWaitsForItsTarget) {
  auto o = infer(node("Less"), {known(DType::kInt64, {3, 1}), known(DType::kInt64, {4})});
  EXPECT_EQ(o[0].dtype, DType::kBool);
  EXPECT_EQ(*o[0].shape, (Shape{3, 4}));
  // Reshape whose target is not a constant: shape unknown until run time.
  Meta target = known(DType::kInt64, {2});
  std::vector<Meta> out(1);
  EXPECT_FALSE(
      find_schema("Reshape")->infer(node("Reshape"), {known(DType::kFloat32, {6}), target}, out));
  std::vector<int64_t> spec = {3, -1};
  target.data = spec.data();
  out = infer(node("Reshape"), {known(DType::kFloat32, {6}), target});
  EXPECT_EQ(*out[0].shape, (Shape{3, 2}));
}

TEST(OpSchemas, MalformedNodesAreTypedErrorsNamingTheNode) {
  std::vector<Meta> out(1);
  try {
    find_schema("Add")->infer(node("Add", "bad_add"),
                              {known(DType::kFloat32, {3, 4}), known(DType::kFloat32, {5})}, out);
    FAIL() << "expected InvalidModelError";
  } catch (const InvalidModelError& e) {
    EXPECT_NE(std::string(e.what()).find("bad_add"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("broadcast"), std::string::npos) << e.what();
  }
  Node c = node("Conv", "bad_conv");
  EXPECT_THROW(
      find_schema("Conv")->infer(
          c, {known(DType::kFloat32, {1, 3, 8, 8}), known(DType::kFloat32, {4, 2, 3, 3})}, out),
      InvalidModelError);  // 2 weight channels for 3 input channels, group 1
  EXPECT_THROW(
      find_schema("MatMul")->infer(
          node("MatMul"), {known(DType::kFloat32, {2, 3}), known(DType::kFloat32, {4, 5})}, out),
      InvalidModelError);
  Node bn = node("BatchNormalization");
  bn.attrs["training_mode"] = graph::Attr::of_int(1);
  std::vector<Meta> five(5, known(DType::kFloat32, {4}));
  five[0] = known(DType::kFloat32, {2, 4});
  EXPECT_THROW(find_schema("BatchNormalization")->infer(bn, five, out), UnsupportedOperationError);
}

// A constant MatMul feeding an Add of a constant: both fold into one constant through
// the registry's CPU kernels; values against a float64 reference.
TEST(OpSchemas, ConstantFoldingRunsTheRegisteredCpuKernels) {
  register_cpu_kernels(KernelRegistry::instance());
  graph::Graph g;
  std::mt19937 rng(7);
  std::normal_distribution<float> d;
  auto constant = [&](const std::string& name, Shape s) {
    graph::HostTensor t = graph::HostTensor::alloc(DType::kFloat32, s);
    for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = d(rng);
    const int id = g.value_id(name);
    g.values[id].constant = t;
    g.values[id].dtype = DType::kFloat32;
    g.values[id].dtype_known = true;
    g.values[id].shape = s;
    return t;
  };
  const graph::HostTensor a = constant("a", {3, 5}), b = constant("b", {5, 4}),
                          c = constant("c", {4});
  const int x = g.value_id("x");
  g.values[x].shape = Shape{3, 4};
  g.values[x].dtype_known = true;
  g.inputs.push_back(x);
  auto add = [&](const std::string& op, std::vector<std::string> in, const std::string& out) {
    Node n = node(op, out + "_node");
    for (auto& s : in) n.inputs.push_back(g.value_id(s));
    n.outputs.push_back(g.value_id(out));
    g.add_node(std::move(n));
  };
  add("MatMul", {"a", "b"}, "ab");
  add("Add", {"ab", "c"}, "abc");
  add("Mul", {"abc", "x"}, "y");
  g.outputs.push_back(g.value_id("y"));
  EXPECT_EQ(graph::passes::infer_and_fold(g, true), 2);
  const graph::HostTensor& folded = g.values[g.find("abc")].constant;
  ASSERT_TRUE(folded.defined());
  ASSERT_EQ(folded.shape, (Shape{3, 4}));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      double ref = c.ptr<float>()[j];
      for (int64_t k = 0; k < 5; ++k)
        ref += static_cast<double>(a.ptr<float>()[i * 5 + k]) * b.ptr<float>()[k * 4 + j];
      EXPECT_NEAR(folded.ptr<float>()[i * 4 + j], ref, 1e-5 * (1 + std::abs(ref)));
    }
  EXPECT_EQ(*g.values[g.find("y")].shape, (Shape{3, 4}));
}

}  // namespace
}  // namespace xpuruntime::ops
