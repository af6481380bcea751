// Conv kernel "onednn" against a float64 reference on random inputs: 1-D, 2-D and
// 3-D, groups (depthwise included), strides, dilations, asymmetric pads, bias, the
// fused residual and activations; constant weights packed at prepare and weights
// that arrive per run; a step prepared without shapes that meets two (the
// primitive cache). Skips, saying why, in a build without oneDNN, after checking
// that the kernel then rejects every case with backend_unavailable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/kernels/onednn/onednn_context.h"
#include "backends/cpu/kernels/cpu_op.h"
#include "cpu_test_util.h"
#include "xpuruntime/ops/epilogue.h"

namespace xpuruntime::cpu {
namespace {

using test::randn;

struct Case {
  Shape x, w;  // X [N, C, spatial...], W [M, C/group, k...]
  std::vector<int64_t> s, d, pads;  // pads: begins then ends
  int64_t group = 1;
  bool bias = true, residual = false;
  std::string act;  // "" = none
  double alpha = 0, beta = 0;
};

// Output shape and float64 result (before residual and activation).
std::vector<double> conv_ref(const Case& c, const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>& b, Shape& ys) {
  const std::size_t r = c.x.size() - 2;
  // Pad every case to 3 spatial dims (leading size-1 dims) to index uniformly.
  int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, p[3] = {0, 0, 0},
          o[3] = {1, 1, 1};
  ys = {c.x[0], c.w[0]};
  for (std::size_t i = 0; i < r; ++i) {
    const std::size_t j = 3 - r + i;
    in[j] = c.x[2 + i], k[j] = c.w[2 + i], s[j] = c.s[i], d[j] = c.d[i], p[j] = c.pads[i];
    o[j] = (in[j] + c.pads[i] + c.pads[r + i] - ((k[j] - 1) * d[j] + 1)) / s[j] + 1;
    ys.push_back(o[j]);
  }
  const int64_t n_ = c.x[0], ch = c.x[1], m_ = c.w[0], cg = ch / c.group, mg = m_ / c.group;
  std::vector<double> y(static_cast<std::size_t>(n_ * m_ * o[0] * o[1] * o[2]), 0.0);
  std::size_t at = 0;
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t m = 0; m < m_; ++m)
      for (int64_t o0 = 0; o0 < o[0]; ++o0)
        for (int64_t o1 = 0; o1 < o[1]; ++o1)
          for (int64_t o2 = 0; o2 < o[2]; ++o2) {
            double acc = b.empty() ? 0.0 : b[m];
            const int64_t g = m / mg;
            for (int64_t ci = 0; ci < cg; ++ci)
              for (int64_t k0 = 0; k0 < k[0]; ++k0)
                for (int64_t k1 = 0; k1 < k[1]; ++k1)
                  for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                    const int64_t i0 = o0 * s[0] - p[0] + k0 * d[0], i1 = o1 * s[1] - p[1] + k1 * d[1],
                                  i2 = o2 * s[2] - p[2] + k2 * d[2];
                    if (i0 < 0 || i1 < 0 || i2 < 0 || i0 >= in[0] || i1 >= in[1] || i2 >= in[2]) continue;
                    const int64_t xi = (((n * ch + g * cg + ci) * in[0] + i0) * in[1] + i1) * in[2] + i2;
                    const int64_t wi = (((m * cg + ci) * k[0] + k0) * k[1] + k1) * k[2] + k2;
                    acc += static_cast<double>(x[xi]) * w[wi];
                  }
            y[at++] = acc;
          }
  return y;
}

double act_ref(const Case& c, double v) {
  if (c.act == "Relu") return std::max(v, 0.0);
  if (c.act == "LeakyRelu") return v >= 0 ? v : c.alpha * v;
  if (c.act == "Sigmoid") return 1.0 / (1.0 + std::exp(-v));
  if (c.act == "Tanh") return std::tanh(v);
  if (c.act == "HardSigmoid") return std::clamp(c.alpha * v + c.beta, 0.0, 1.0);
  if (c.act == "HardSwish") return v * std::clamp(v / 6 + 0.5, 0.0, 1.0);
  if (c.act == "Clip") return std::clamp(v, c.alpha, c.beta);
  if (c.act == "Gelu") return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  return v;
}

Node conv_node(const Case& c) {
  Node n;
  n.name = "conv";
  n.op_type = "Conv";
  n.attrs["strides"] = graph::Attr::of_ints(c.s);
  n.attrs["dilations"] = graph::Attr::of_ints(c.d);
  n.attrs["pads"] = graph::Attr::of_ints(c.pads);
  n.attrs["group"] = graph::Attr::of_int(c.group);
  ops::Epilogue e;
  e.residual = c.residual;
  if (!c.act.empty()) {
    Node a;
    a.op_type = c.act;
    if (c.act == "LeakyRelu" || c.act == "HardSigmoid") a.attrs["alpha"] = graph::Attr::of_float(c.alpha);
    if (c.act == "HardSigmoid") a.attrs["beta"] = graph::Attr::of_float(c.beta);
    const double lo = c.act == "Clip" ? c.alpha : -INFINITY, hi = c.act == "Clip" ? c.beta : INFINITY;
    EXPECT_TRUE(ops::Epilogue::activation_of(a, lo, hi, e)) << c.act;
  }
  e.to_attrs(n.attrs);
  return n;
}

KernelPtr onednn_kernel(KernelRegistry& reg) {
  register_cpu_kernels(reg);
  return reg.find("conv", "onednn");
}

OpContext conv_ctx(const Case& c, const Shape& ys, bool shapes) {
  OpContext ctx;
  ctx.op = "conv";
  ctx.node = "conv";
  for (const auto& [k, v] : conv_node(c).attrs) ctx.attrs[k] = v.text();  // as the planner gives them
  auto spec = [&](const Shape& s) { return TensorSpec{DType::kFloat32, shapes ? s : Shape{}, {}}; };
  ctx.inputs = {spec(c.x), spec(c.w)};
  if (c.bias || c.residual) ctx.inputs.push_back(spec({c.w[0]}));
  if (c.residual) ctx.inputs.push_back(spec(ys));
  ctx.outputs = {spec(ys)};
  return ctx;
}

// Runs the case through the registered kernel as a plan step does and compares
// with float64: |err| <= 1e-4 * (1 + |ref|). const_w: W is a plan constant.
void check(const Case& c, bool const_w, unsigned seed, bool static_shapes = true) {
  SCOPED_TRACE("X " + shape_str(c.x) + " W " + shape_str(c.w) + " group " + std::to_string(c.group) +
               " act '" + c.act + "' residual " + std::to_string(c.residual));
  KernelRegistry reg;
  KernelPtr k = onednn_kernel(reg);
  ASSERT_NE(k, nullptr);
  auto x = randn(static_cast<std::size_t>(shape_numel(c.x)), seed);
  auto w = randn(static_cast<std::size_t>(shape_numel(c.w)), seed + 1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(shape_numel(c.w) / c.w[0]));
  for (float& v : w) v = static_cast<float>(v * scale);
  std::vector<float> b = c.bias ? randn(static_cast<std::size_t>(c.w[0]), seed + 2) : std::vector<float>{};
  Shape ys;
  std::vector<double> ref = conv_ref(c, x, w, b, ys);
  std::vector<float> res = c.residual ? randn(ref.size(), seed + 3) : std::vector<float>{};
  for (std::size_t i = 0; i < ref.size(); ++i) ref[i] = act_ref(c, ref[i] + (c.residual ? res[i] : 0.0));

  Node n = conv_node(c);
  OpContext ctx = conv_ctx(c, ys, static_shapes);
  std::vector<float> zeros(static_cast<std::size_t>(c.w[0]), 0.f);
  if (static_shapes) ASSERT_TRUE(k->supports(ctx).ok) << k->supports(ctx).detail;
  PrepareContext pc;
  pc.ctx = &ctx;
  pc.node = &n;
  pc.constants.resize(ctx.inputs.size());
  if (const_w) pc.constants[1] = graph::HostTensor::wrap(DType::kFloat32, c.w, w.data(), nullptr);
  PreparedKernelPtr p = k->prepare(pc);
  std::vector<float> y(ref.size(), 0.f);
  KernelArgs args;
  args.inputs = {TensorArg{DType::kFloat32, c.x, x.data()}, TensorArg{DType::kFloat32, c.w, w.data()}};
  if (c.bias) args.inputs.push_back(TensorArg{DType::kFloat32, {c.w[0]}, b.data()});
  else if (c.residual) args.inputs.push_back(TensorArg{DType::kFloat32, {c.w[0]}, nullptr});  // omitted
  if (c.residual) args.inputs.push_back(TensorArg{DType::kFloat32, ys, res.data()});
  args.outputs = {TensorArg{DType::kFloat32, ys, y.data()}};
  for (int rep = 0; rep < 2; ++rep) {  // a second run reuses the packed weights
    std::fill(y.begin(), y.end(), -7.f);
    p->run(args);
    for (std::size_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(y[i], ref[i], 1e-4 * (1 + std::abs(ref[i]))) << "element " << i << " run " << rep;
  }
}

class OnednnConv : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!onednn::onednn_available()) {
      // The kernel is still registered and says why it cannot run.
      KernelRegistry reg;
      KernelPtr k = onednn_kernel(reg);
      ASSERT_NE(k, nullptr);
      Case c{{1, 2, 5, 5}, {3, 2, 3, 3}, {1, 1}, {1, 1}, {0, 0, 0, 0}};
      Support s = k->supports(conv_ctx(c, {1, 3, 3, 3}, true));
      EXPECT_FALSE(s.ok);
      EXPECT_EQ(s.reason_code, reason::kBackendUnavailable);
      GTEST_SKIP() << onednn::onednn_info();
    }
  }
};

TEST_F(OnednnConv, TwoDimensionalCasesMatchFloat64) {
  std::mt19937 rng(18);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const char* acts[] = {"", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Clip", "Gelu"};
  for (int t = 0; t < 24; ++t) {
    Case c;
    const int64_t group = t % 4 == 0 ? 1 : t % 4 == 1 ? pick(2, 3) : 1;
    const int64_t cg = pick(1, 6), mg = pick(1, 7);
    const int64_t kh = pick(1, 5), kw = pick(1, 4);
    const int64_t sh = pick(1, 3), sw = pick(1, 2), dh = pick(1, 2), dw = pick(1, 2);
    const int64_t h = (kh - 1) * dh + pick(1, 12), w = (kw - 1) * dw + pick(1, 14);
    c.x = {pick(1, 2), group * cg, h, w};
    c.w = {group * mg, cg, kh, kw};
    c.s = {sh, sw};
    c.d = {dh, dw};
    c.pads = {pick(0, 2), pick(0, 2), pick(0, 2), pick(0, 1)};  // asymmetric
    c.group = group;
    c.bias = t % 3 != 2;
    c.residual = t % 5 == 3;
    c.act = acts[t % 9];
    c.alpha = c.act == "Clip" ? -0.5 : c.act == "HardSigmoid" ? 0.2 : 0.1;
    c.beta = c.act == "Clip" ? 0.75 : 0.5;
    check(c, t % 2 == 0, 100 + t);
  }
}

TEST_F(OnednnConv, DepthwiseWithMultiplierStridesAndActivation) {
  Case c{{1, 16, 15, 17}, {16, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 16, true, false, "HardSwish"};
  check(c, true, 7);
  Case m{{2, 4, 9, 12}, {8, 1, 5, 5}, {1, 2}, {2, 1}, {4, 2, 4, 2}, 4, true, true, "Relu"};
  check(m, false, 8);
  Case big{{1, 32, 28, 28}, {64, 32, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, true, true, "Relu"};
  check(big, true, 9);  // the blocked (direct) path with reorders in and out
}

TEST_F(OnednnConv, ResidualAndBiasWhereWindowsSeeOnlyPadding) {
  // Output rows 0-1 see only the top padding (kernel height 1): oneDNN 2.6's blocked
  // path dropped the residual there when a bias was fused too.
  Case c{{2, 2, 9, 11}, {5, 2, 1, 4}, {1, 2}, {2, 2}, {2, 0, 0, 0}, 1, true, true, ""};
  check(c, true, 30);
  c.act = "Relu";
  check(c, false, 31);
}

TEST_F(OnednnConv, OneAndThreeSpatialDims) {
  Case c1{{2, 6, 31}, {4, 3, 5}, {2}, {2}, {3, 1}, 2, true, false, "Sigmoid"};
  check(c1, true, 11);
  Case c3{{1, 4, 6, 7, 8}, {6, 4, 3, 3, 3}, {1, 2, 1}, {1, 1, 2}, {1, 1, 0, 1, 0, 2}, 1, false, true, "Relu"};
  check(c3, false, 12);
}

TEST_F(OnednnConv, StepPreparedWithoutShapesBuildsPerShape) {
  // A dynamic-shape step: prepared without shapes, then run at two input sizes
  // (and back), each against its own reference.
  for (int64_t hw : {9, 14, 9}) {
    Case c{{1, 3, hw, hw}, {5, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, true, false, "Relu"};
    check(c, true, 20 + static_cast<unsigned>(hw), /*static_shapes=*/false);
  }
}

TEST_F(OnednnConv, RejectsOtherDtypesWithTheReason) {
  KernelRegistry reg;
  KernelPtr k = onednn_kernel(reg);
  Case c{{1, 2, 5, 5}, {3, 2, 3, 3}, {1, 1}, {1, 1}, {0, 0, 0, 0}};
  OpContext ctx = conv_ctx(c, {1, 3, 3, 3}, true);
  for (TensorSpec& s : ctx.inputs) s.dtype = DType::kFloat64;
  const Support s = k->supports(ctx);
  EXPECT_FALSE(s.ok);
  EXPECT_EQ(s.reason_code, reason::kDtypeUnsupported);
}

}  // namespace
}  // namespace xpuruntime::cpu
