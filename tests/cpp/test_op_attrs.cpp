// Typed attribute structs (cpp/include/xpuruntime/ops/): defaults as ONNX gives
// them, values read from typed node attributes, malformed attributes as typed
// errors naming the node — raised when a CPU kernel is prepared, not on each run.
#include <gtest/gtest.h>

#include "backends/cpu/cpu_kernels.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/data.h"
#include "xpuruntime/ops/gemm.h"
#include "xpuruntime/ops/nn.h"
#include "xpuruntime/ops/reduce.h"
#include "xpuruntime/ops/shape_rules.h"
#include "xpuruntime/ops/spatial.h"

namespace xpuruntime::ops {
namespace {

using graph::Attr;

Node op(const std::string& type, const std::string& name = "n") {
  Node n;
  n.op_type = type;
  n.name = name;
  return n;
}

TEST(OpAttrs, DefaultsAndValues) {
  const ConvAttrs c0 = ConvAttrs::from_node(op("Conv"));
  EXPECT_EQ(c0.group, 1);
  EXPECT_EQ(c0.window.auto_pad, "NOTSET");
  EXPECT_TRUE(c0.window.strides.empty());
  Node c = op("Conv");
  c.attrs["group"] = Attr::of_int(4);
  c.attrs["auto_pad"] = Attr::of_string("SAME_UPPER");
  c.attrs["strides"] = Attr::of_ints({2, 2});
  const ConvAttrs c1 = ConvAttrs::from_node(c);
  EXPECT_EQ(c1.group, 4);
  // SAME_UPPER, stride 2 over 9: ceil(9 / 2) = 5 outputs; 3x3 window needs 2 pad, 1 at each end.
  const Spatial g = conv_geometry(c1, {1, 4, 9, 9}, {8, 1, 3, 3});
  EXPECT_EQ(g.out, (std::vector<int64_t>{5, 5}));
  EXPECT_EQ(g.pb, (std::vector<int64_t>{1, 1}));

  Node p = op("AveragePool");
  p.attrs["kernel_shape"] = Attr::of_ints({2});
  p.attrs["strides"] = Attr::of_ints({2});
  p.attrs["count_include_pad"] = Attr::of_int(1);
  p.attrs["ceil_mode"] = Attr::of_int(1);
  const PoolAttrs pa = PoolAttrs::from_node(p);
  EXPECT_TRUE(pa.count_include_pad);
  EXPECT_TRUE(pa.window.ceil_mode);
  EXPECT_EQ(pool_geometry(pa, {1, 1, 5}).out, (std::vector<int64_t>{3}));  // ceil((5-2)/2)+1

  const GemmAttrs g0 = GemmAttrs::from_node(op("Gemm"));
  EXPECT_FALSE(g0.trans_a);
  EXPECT_DOUBLE_EQ(g0.alpha, 1.0);
  EXPECT_DOUBLE_EQ(g0.beta, 1.0);

  const LayerNormAttrs ln = LayerNormAttrs::from_node(op("LayerNormalization"));
  EXPECT_EQ(ln.axis, -1);
  EXPECT_DOUBLE_EQ(ln.epsilon, 1e-5);
  EXPECT_EQ(ln.stash_type, 1);
  EXPECT_EQ(SoftmaxAttrs::from_node(op("Softmax")).axis, -1);

  EXPECT_EQ(AxisAttrs::from_node(op("Concat")).axis, 0);
  Node pad = op("Pad");
  pad.attrs["mode"] = Attr::of_string("reflect");
  pad.attrs["pads"] = Attr::of_ints({1, 2});
  const PadAttrs pa2 = PadAttrs::from_node(pad);
  EXPECT_EQ(pa2.mode, "reflect");
  EXPECT_EQ(pa2.pads, (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(TriluAttrs::from_node(op("Trilu")).upper);
  Node cs = op("CumSum");
  cs.attrs["reverse"] = Attr::of_int(1);
  EXPECT_TRUE(CumSumAttrs::from_node(cs).reverse);
  EXPECT_FALSE(CumSumAttrs::from_node(cs).exclusive);
}

TEST(OpAttrs, ReduceAxesFromTheAttributeOrInputOne) {
  Node r = op("ReduceSum");
  r.attrs["axes"] = Attr::of_ints({-1, 0, 0});
  const ReduceAttrs a = ReduceAttrs::from_node(r);
  EXPECT_TRUE(a.keepdims);
  std::vector<int64_t> axes;
  bool noop = true;
  ASSERT_TRUE(reduce_axes(a, {out_meta(DType::kFloat32, {2, 3, 4})}, 3, axes, noop));
  EXPECT_EQ(axes, (std::vector<int64_t>{0, 2}));
  EXPECT_FALSE(noop);
  // Input 1 wins over the attribute; unknown value: not resolvable yet.
  std::vector<int64_t> one = {1};
  Meta ax = out_meta(DType::kInt64, {1});
  ax.data = one.data();
  ASSERT_TRUE(reduce_axes(a, {out_meta(DType::kFloat32, {2, 3, 4}), ax}, 3, axes, noop));
  EXPECT_EQ(axes, (std::vector<int64_t>{1}));
  ax.data = nullptr;
  EXPECT_FALSE(reduce_axes(a, {out_meta(DType::kFloat32, {2, 3, 4}), ax}, 3, axes, noop));
  Node e = op("ReduceMax", "rm");
  e.attrs["noop_with_empty_axes"] = Attr::of_int(1);
  ASSERT_TRUE(
      reduce_axes(ReduceAttrs::from_node(e), {out_meta(DType::kFloat32, {2})}, 1, axes, noop));
  EXPECT_TRUE(noop);
  e.attrs["axes"] = Attr::of_ints({3});
  try {
    reduce_axes(ReduceAttrs::from_node(e), {out_meta(DType::kFloat32, {2})}, 1, axes, noop);
    FAIL() << "expected InvalidModelError";
  } catch (const InvalidModelError& err) {
    EXPECT_NE(std::string(err.what()).find("rm"), std::string::npos) << err.what();
  }
}

TEST(OpAttrs, MalformedAttributesFailWhenTheKernelIsPrepared) {
  Node c = op("Conv", "conv_bad");
  c.attrs["auto_pad"] = Attr::of_string("SAME_MIDDLE");
  try {
    ConvAttrs::from_node(c);
    FAIL() << "expected InvalidModelError";
  } catch (const InvalidModelError& e) {
    EXPECT_NE(std::string(e.what()).find("conv_bad"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("SAME_MIDDLE"), std::string::npos) << e.what();
  }
  EXPECT_THROW(PoolAttrs::from_node(op("MaxPool")), InvalidModelError);  // no kernel_shape

  KernelRegistry reg;
  register_cpu_kernels(reg);
  OpContext ctx;
  ctx.op = "conv";
  PrepareContext pc;
  pc.ctx = &ctx;
  pc.node = &c;
  for (const char* k : {"cpu_direct", "cpu_depthwise", "cpu_im2col"})
    EXPECT_THROW(reg.find("conv", k)->prepare(pc), InvalidModelError) << k;
  Node mp = op("MaxPool", "pool_bad");
  pc.node = &mp;
  ctx.op = "maxpool";
  EXPECT_THROW(reg.find("maxpool", "cpu")->prepare(pc), InvalidModelError);
  Node pad = op("Pad", "pad_bad");
  pad.attrs["mode"] = Attr::of_string("mirror");
  pc.node = &pad;
  ctx.op = "pad";
  EXPECT_THROW(reg.find("pad", "cpu")->prepare(pc), InvalidModelError);
}

}  // namespace
}  // namespace xpuruntime::ops
