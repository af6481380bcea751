// The precision pass's constant conversion (graph/precision.cpp): the vectorized
// F16C path must give the bits of the scalar reference (float_to_half after clamping
// finite values to the fp16 range) for every kind of float: normals, subnormals,
// halfway cases, the range limits, infinities, and any length (the vector tail).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "core/half_float.h"
#include "graph/passes.h"

namespace xpuruntime::graph {
namespace {

uint16_t reference_half(float v) {
  if (std::isfinite(v)) v = std::clamp(v, -65504.0f, 65504.0f);
  return matmul::float_to_half(v);
}

// One constant of `values` read by a Relu whose output is the graph output; lowered.
HostTensor lowered(const std::vector<float>& values, DType to) {
  Graph g;
  const int c = g.value_id("c");
  g.values[c].constant = HostTensor::alloc(DType::kFloat32, {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), g.values[c].constant.ptr<float>());
  g.values[c].dtype = DType::kFloat32;
  g.values[c].dtype_known = true;
  const int x = g.value_id("x");
  g.values[x].dtype = DType::kFloat32;
  g.values[x].dtype_known = true;
  g.values[x].shape = Shape{static_cast<int64_t>(values.size())};
  g.inputs = {x};
  const int y = g.value_id("y");
  g.values[y].dtype = DType::kFloat32;
  g.values[y].dtype_known = true;
  Node add;
  add.name = "add";
  add.op_type = "Add";
  add.inputs = {x, c};
  add.outputs = {y};
  g.add_node(add);
  g.outputs = {y};
  passes::lower_precision(g, to);
  return g.values[c].constant;
}

TEST(PrecisionLowering, Float16ConstantsMatchTheScalarConversionBitForBit) {
  std::vector<float> v = {0.0f,          -0.0f,        1.0f,      -1.0f,     65504.0f, 65519.0f,
                          65520.0f,      1e6f,         -1e6f,     6.0e-8f,   2.98e-8f, 5.96e-8f,
                          1e-40f,        -1e-40f,      1.0009765625f,       // a halfway case
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()};
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 100003; ++i) {  // odd length: the scalar tail runs too
    float f = std::bit_cast<float>(bits(rng));
    if (std::isnan(f)) f = 1.5f;
    v.push_back(f);
  }
  const HostTensor h = lowered(v, DType::kFloat16);
  ASSERT_EQ(h.dtype, DType::kFloat16);
  ASSERT_EQ(h.numel(), static_cast<int64_t>(v.size()));
  for (std::size_t i = 0; i < v.size(); ++i)
    ASSERT_EQ(h.ptr<uint16_t>()[i], reference_half(v[i])) << "element " << i << " = " << v[i];
}

TEST(PrecisionLowering, NaNStaysNaNInBothTargets) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> v(19, nan);
  const HostTensor h = lowered(v, DType::kFloat16);
  for (int i = 0; i < 19; ++i) {
    const uint16_t b = h.ptr<uint16_t>()[i];
    EXPECT_EQ(b & 0x7c00u, 0x7c00u);
    EXPECT_NE(b & 0x03ffu, 0u);
  }
  const HostTensor bf = lowered(v, DType::kBFloat16);
  for (int i = 0; i < 19; ++i) EXPECT_TRUE(std::isnan(std::bit_cast<float>(uint32_t{bf.ptr<uint16_t>()[i]} << 16)));
}

}  // namespace
}  // namespace xpuruntime::graph
