// The precision-lowering pass (graph/precision.cpp): a float32 graph compiled for
// fp16/bf16 keeps its float32 interface through Casts, narrows every other float32
// value, converts constants once with saturation, and retargets float32 Casts.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/half_float.h"
#include "graph/passes.h"
#include "xpuruntime/error.h"

namespace xpuruntime::graph {
namespace {

// x (f32 input) -> Mul(x, c) -> Cast(to=float) -> Add(., x) -> y (f32 output); an int64
// input `n` passes through untouched.
Graph small_graph() {
  Graph g;
  const int x = g.value_id("x");
  const int c = g.value_id("c");
  const int m = g.value_id("m");
  const int k = g.value_id("k");
  const int y = g.value_id("y");
  const int n = g.value_id("n");
  for (int v : {x, c, m, k, y}) {
    g.values[v].dtype = DType::kFloat32;
    g.values[v].dtype_known = true;
    g.values[v].shape = Shape{4};
  }
  g.values[n].dtype = DType::kInt64;
  g.values[n].dtype_known = true;
  g.values[n].shape = Shape{1};
  HostTensor ct = HostTensor::alloc(DType::kFloat32, {4});
  const float vals[4] = {1.5f, -std::numeric_limits<float>::max(), 1e6f,
                         -std::numeric_limits<float>::infinity()};
  for (int i = 0; i < 4; ++i) ct.ptr<float>()[i] = vals[i];
  g.values[c].constant = ct;
  g.inputs = {x, n};
  g.outputs = {y, n};
  Node mul{"mul", "Mul", "", {x, c}, {m}, {}};
  Node cast{"cast", "Cast", "", {m}, {k}, {{"to", Attr::of_int(1)}}};
  Node add{"add", "Add", "", {k, x}, {y}, {}};
  g.add_node(mul);
  g.add_node(cast);
  g.add_node(add);
  return g;
}

TEST(PrecisionPass, KeepsTheFloat32InterfaceAndNarrowsTheRest) {
  Graph g = small_graph();
  const int changed = passes::lower_precision(g, DType::kFloat16);
  EXPECT_GT(changed, 0);
  g.validate();
  const int x = g.find("x"), y = g.find("y"), n = g.find("n"), c = g.find("c"), m = g.find("m");
  EXPECT_EQ(g.values[x].dtype, DType::kFloat32);
  EXPECT_EQ(g.values[y].dtype, DType::kFloat32);
  EXPECT_EQ(g.values[n].dtype, DType::kInt64);
  EXPECT_EQ(g.values[m].dtype, DType::kFloat16);
  // y is now written by a Cast back to float32; x feeds its readers through a Cast.
  const Node& producer = g.nodes[g.values[y].producer];
  EXPECT_EQ(producer.op_type, "Cast");
  EXPECT_EQ(producer.attr_int("to", 0), 1);
  for (const Node& node : g.nodes) {
    if (node.op_type == "Cast" && node.name == "cast") EXPECT_EQ(node.attr_int("to", 0), 10);
    if (node.op_type == "Mul" || node.op_type == "Add")
      for (int i : node.inputs) EXPECT_NE(g.values[i].dtype, DType::kFloat32) << g.values[i].name;
  }
  // Constants: converted once; finite values saturate at the fp16 maximum, infinities stay.
  const HostTensor& ct = g.values[c].constant;
  ASSERT_EQ(ct.dtype, DType::kFloat16);
  const auto* h = ct.ptr<uint16_t>();
  EXPECT_EQ(matmul::half_to_float(h[0]), 1.5f);
  EXPECT_EQ(matmul::half_to_float(h[1]), -65504.0f);
  EXPECT_EQ(matmul::half_to_float(h[2]), 65504.0f);
  EXPECT_TRUE(std::isinf(matmul::half_to_float(h[3])));
}

TEST(PrecisionPass, BFloat16KeepsTheFloat32Range) {
  Graph g = small_graph();
  passes::lower_precision(g, DType::kBFloat16);
  const HostTensor& ct = g.values[g.find("c")].constant;
  ASSERT_EQ(ct.dtype, DType::kBFloat16);
  EXPECT_GT(std::abs(matmul::bf16_to_float(ct.ptr<uint16_t>()[1])), 1e38f);
  for (const Node& node : g.nodes)
    if (node.name == "cast") EXPECT_EQ(node.attr_int("to", 0), 16);
}

TEST(PrecisionPass, RefusesATargetThatIsNotAHalfType) {
  Graph g = small_graph();
  EXPECT_THROW(passes::lower_precision(g, DType::kInt8), InvalidArgumentError);
}

}  // namespace
}  // namespace xpuruntime::graph
