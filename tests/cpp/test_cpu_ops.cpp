// CPU op kernels against float64 references: the fast math functions, numpy
// broadcasting, softmax, layernorm, convolution (both kernels), pooling, and the
// fused elementwise program. Odd sizes on purpose.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_kernels.h"
#include "cpu_test_util.h"
#include "backends/cpu/kernels/matmul/cpu_gemm_impl.h"
#include "backends/cpu/kernels/cpu_op.h"
#include "backends/cpu/kernels/fastmath.h"
#include "backends/cpu/kernels/fused.h"
#include "backends/cpu/kernels/elementwise.h"

namespace xpuruntime::cpu {
namespace {

using test::randn;

TensorView view(std::vector<float>& v, Shape s) { return TensorView{DType::kFloat32, std::move(s), v.data()}; }

// Runs op through its registered kernel the way a plan step does: prepared once on
// the node (typed attributes), then run with the views as TensorArgs.
void run(const std::string& op, const std::string& kernel, Node n, std::vector<TensorView> in,
         std::vector<TensorView> out) {
  KernelRegistry reg;
  register_cpu_kernels(reg);
  KernelPtr k = reg.find(op_key(op), kernel);
  ASSERT_NE(k, nullptr) << op << "/" << kernel;
  n.op_type = op;
  OpContext ctx;
  ctx.op = op_key(op);
  ctx.node = op;
  auto spec = [](const TensorView& v) { return TensorSpec{v.dtype, v.shape, {}}; };
  for (const TensorView& v : in) ctx.inputs.push_back(spec(v));
  for (const TensorView& v : out) ctx.outputs.push_back(spec(v));
  PrepareContext pc;
  pc.ctx = &ctx;
  pc.node = &n;
  PreparedKernelPtr p = k->prepare(pc);
  KernelArgs args;
  for (const TensorView& v : in) args.inputs.push_back(TensorArg{v.dtype, v.shape, v.data});
  for (const TensorView& v : out) args.outputs.push_back(TensorArg{v.dtype, v.shape, v.data});
  p->run(args);
}

TEST(CpuFastMath, MatchesLibmToTheStatedBounds) {
  double worst_exp = 0, worst_tanh = 0, worst_erf = 0, worst_sig = 0;
  for (double x = -87.0; x <= 88.0; x += 0.0137) {
    const float f = static_cast<float>(x);
    const double e = std::exp(static_cast<double>(f));
    worst_exp = std::max(worst_exp, std::abs(fast_exp(f) - e) / e);
  }
  for (double x = -12.0; x <= 12.0; x += 0.00071) {
    const float f = static_cast<float>(x);
    worst_tanh = std::max(worst_tanh, std::abs(fast_tanh(f) - std::tanh(static_cast<double>(f))));
    worst_erf = std::max(worst_erf, std::abs(fast_erf(f) - std::erf(static_cast<double>(f))));
    worst_sig = std::max(worst_sig, std::abs(fast_sigmoid(f) - 1.0 / (1.0 + std::exp(-static_cast<double>(f)))));
  }
  EXPECT_LT(worst_exp, 3e-7);   // ~2 ulp
  EXPECT_LT(worst_tanh, 3e-7);
  EXPECT_LT(worst_erf, 3e-7);
  EXPECT_LT(worst_sig, 3e-7);
}

TEST(CpuFastMath, ErfHoldsItsBoundsOverEveryFloatBitPattern) {
  // Float rounding, not the fit, sets erf's worst error: a grid misses it, so walk
  // the bit patterns of [0, 4.5] (and their negatives, erf is odd) with a prime
  // stride, tiny and subnormal values included (absolute bound).
  double worst_abs = 0, worst_rel = 0;
  for (uint32_t b = 0; b < 0x40900000u; b += 4099) {
    float f;
    std::memcpy(&f, &b, sizeof f);
    const double e = std::erf(static_cast<double>(f));
    worst_abs = std::max({worst_abs, std::abs(fast_erf(f) - e), std::abs(fast_erf(-f) + e)});
    // Relative below 0.5 for normal x (a subnormal result has fewer bits than that).
    if (f >= 1.2e-38f && f < 0.5f) worst_rel = std::max(worst_rel, std::abs(fast_erf(f) - e) / e);
  }
  EXPECT_LT(worst_abs, 4e-7);  // 6 ulp of values near 1
  EXPECT_LT(worst_rel, 3e-7);
  EXPECT_EQ(fast_erf(0.0f), 0.0f);
  EXPECT_EQ(fast_erf(30.0f), 1.0f);
  EXPECT_EQ(fast_erf(-INFINITY), -1.0f);
  EXPECT_TRUE(std::isnan(fast_erf(NAN)));
}

TEST(CpuOps, AddBroadcastsLikeNumpy) {
  auto a = randn(7 * 1 * 5, 1), b = randn(3 * 1, 2);
  std::vector<float> y(7 * 3 * 5);
  run("Add", "cpu", {}, {view(a, {7, 1, 5}), view(b, {3, 1})}, {view(y, {7, 3, 5})});
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 5; ++k) EXPECT_FLOAT_EQ(y[(i * 3 + j) * 5 + k], a[i * 5 + k] + b[j]);
}

TEST(CpuOps, IntegerDivisionByZeroIsZeroNotATrap) {
  std::vector<int64_t> a = {7, -7, 5, INT64_MIN}, b = {0, 2, -1, -1}, y(4);
  run("Div", "cpu", {}, {TensorView{DType::kInt64, {4}, a.data()}, TensorView{DType::kInt64, {4}, b.data()}},
      {TensorView{DType::kInt64, {4}, y.data()}});
  EXPECT_EQ(y[0], 0);
  EXPECT_EQ(y[1], -3);
  EXPECT_EQ(y[2], -5);
}

TEST(CpuOps, SoftmaxRowsSumToOneAndMatchFloat64) {
  const int rows = 13, len = 77;
  auto x = randn(rows * len, 3);
  for (float& v : x) v *= 10;
  std::vector<float> y(x.size());
  Node n;
  n.attrs["axis"] = graph::Attr::of_int(-1);
  run("Softmax", "cpu", n, {view(x, {rows, len})}, {view(y, {rows, len})});
  for (int r = 0; r < rows; ++r) {
    double m = -1e300, s = 0;
    for (int i = 0; i < len; ++i) m = std::max(m, static_cast<double>(x[r * len + i]));
    for (int i = 0; i < len; ++i) s += std::exp(x[r * len + i] - m);
    for (int i = 0; i < len; ++i)
      EXPECT_NEAR(y[r * len + i], std::exp(x[r * len + i] - m) / s, 2e-7);
  }
}

TEST(CpuOps, LayerNormMatchesFloat64) {
  const int rows = 9, len = 67;
  auto x = randn(rows * len, 4), g = randn(len, 5), b = randn(len, 6);
  std::vector<float> y(x.size());
  Node n;
  n.attrs["epsilon"] = graph::Attr::of_float(1e-5);
  run("LayerNormalization", "cpu", n, {view(x, {rows, len}), view(g, {len}), view(b, {len})},
      {view(y, {rows, len})});
  for (int r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int i = 0; i < len; ++i) mu += x[r * len + i];
    mu /= len;
    for (int i = 0; i < len; ++i) var += (x[r * len + i] - mu) * (x[r * len + i] - mu);
    var /= len;
    for (int i = 0; i < len; ++i)
      EXPECT_NEAR(y[r * len + i], (x[r * len + i] - mu) / std::sqrt(var + 1e-5) * g[i] + b[i], 2e-5);
  }
}

// Direct float64 convolution (NCHW, groups, stride, pad, dilation).
std::vector<double> conv_ref(const std::vector<float>& x, const std::vector<float>& w, int N, int C, int H,
                             int W, int M, int K, int S, int P, int D, int G, int& OH, int& OW) {
  OH = (H + 2 * P - ((K - 1) * D + 1)) / S + 1;
  OW = (W + 2 * P - ((K - 1) * D + 1)) / S + 1;
  std::vector<double> y(static_cast<std::size_t>(N) * M * OH * OW, 0.0);
  const int cg = C / G, mg = M / G;
  for (int n = 0; n < N; ++n)
    for (int m = 0; m < M; ++m)
      for (int oh = 0; oh < OH; ++oh)
        for (int ow = 0; ow < OW; ++ow) {
          double acc = 0;
          const int g = m / mg;
          for (int c = 0; c < cg; ++c)
            for (int kh = 0; kh < K; ++kh)
              for (int kw = 0; kw < K; ++kw) {
                const int ih = oh * S - P + kh * D, iw = ow * S - P + kw * D;
                if (ih < 0 || iw < 0 || ih >= H || iw >= W) continue;
                acc += static_cast<double>(x[((n * C + g * cg + c) * H + ih) * W + iw]) *
                       w[((m * cg + c) * K + kh) * K + kw];
              }
          y[((n * M + m) * OH + oh) * OW + ow] = acc;
        }
  return y;
}

void check_conv(const std::string& kernel, int N, int C, int H, int W, int M, int K, int S, int P, int D, int G) {
  auto x = randn(static_cast<std::size_t>(N) * C * H * W, 7);
  auto w = randn(static_cast<std::size_t>(M) * (C / G) * K * K, 8);
  int OH = 0, OW = 0;
  auto ref = conv_ref(x, w, N, C, H, W, M, K, S, P, D, G, OH, OW);
  std::vector<float> y(ref.size());
  Node n;
  n.attrs["strides"] = graph::Attr::of_ints({S, S});
  n.attrs["pads"] = graph::Attr::of_ints({P, P, P, P});
  n.attrs["dilations"] = graph::Attr::of_ints({D, D});
  n.attrs["group"] = graph::Attr::of_int(G);
  run("Conv", kernel, n, {view(x, {N, C, H, W}), view(w, {M, C / G, K, K})}, {view(y, {N, M, OH, OW})});
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref[i], 1e-4 * (1 + std::abs(ref[i]))) << i;
}

TEST(CpuOps, ConvIm2colMatchesDirectFloat64) {
  check_conv("cpu_im2col", 2, 5, 11, 9, 7, 3, 2, 1, 1, 1);
  check_conv("cpu_im2col", 1, 6, 10, 10, 4, 3, 1, 2, 2, 2);  // groups + dilation
  check_conv("cpu_im2col", 2, 8, 7, 7, 6, 1, 1, 0, 1, 1);   // 1x1: GEMM on the input
  check_conv("cpu_im2col", 1, 3, 45, 41, 5, 7, 1, 3, 1, 1);  // several im2col column blocks
}

TEST(CpuOps, ConvDirectMatchesFloat64) {
  if (!matmul::cpu_has_avx2_fma()) GTEST_SKIP() << "cpu_direct needs an AVX2/FMA CPU";
  // Exact-size buffers, so the sanitizer build sees any read past the input.
  check_conv("cpu_direct", 1, 4, 12, 12, 7, 3, 1, 0, 1, 1);   // no padding, 3x3: copied input
  check_conv("cpu_direct", 2, 8, 7, 7, 6, 1, 1, 0, 1, 1);     // 1x1: the input itself, narrow column
  check_conv("cpu_direct", 1, 5, 13, 11, 9, 3, 2, 1, 1, 1);   // stride 2: phase planes
  check_conv("cpu_direct", 1, 6, 10, 10, 4, 3, 1, 2, 2, 2);   // groups + dilation
  check_conv("cpu_direct", 1, 40, 9, 9, 13, 3, 1, 1, 1, 1);   // 360 taps: K chunks
  check_conv("cpu_direct", 1, 3, 29, 31, 100, 7, 2, 3, 1, 1); // stem, >96 output channels
}

TEST(CpuOps, ConvDepthwiseMatchesDirectFloat64) {
  check_conv("cpu_depthwise", 2, 6, 13, 11, 6, 3, 1, 1, 1, 6);
  check_conv("cpu_depthwise", 1, 5, 16, 16, 5, 5, 2, 2, 1, 5);
}

TEST(CpuOps, MaxPoolWithPaddingAndStride) {
  auto x = randn(2 * 3 * 9 * 8, 9);
  std::vector<float> y(2 * 3 * 5 * 4);
  Node n;
  n.attrs["kernel_shape"] = graph::Attr::of_ints({3, 3});
  n.attrs["strides"] = graph::Attr::of_ints({2, 2});
  n.attrs["pads"] = graph::Attr::of_ints({1, 1, 1, 1});
  run("MaxPool", "cpu", n, {view(x, {2, 3, 9, 8})}, {view(y, {2, 3, 5, 4})});
  for (int p = 0; p < 6; ++p)
    for (int oh = 0; oh < 5; ++oh)
      for (int ow = 0; ow < 4; ++ow) {
        float m = -INFINITY;
        for (int kh = 0; kh < 3; ++kh)
          for (int kw = 0; kw < 3; ++kw) {
            const int ih = oh * 2 - 1 + kh, iw = ow * 2 - 1 + kw;
            if (ih >= 0 && iw >= 0 && ih < 9 && iw < 8) m = std::max(m, x[(p * 9 + ih) * 8 + iw]);
          }
        EXPECT_EQ(y[(p * 5 + oh) * 4 + ow], m);
      }
}

TEST(CpuOps, FusedGeluProgramMatchesUnfusedOps) {
  // acc = x; acc /= sqrt2; erf; acc += 1; acc = x * acc; acc *= 0.5
  auto x = randn(1000 + 3, 10);
  std::vector<float> c_sqrt2 = {1.41421356f}, c_one = {1.0f}, c_half = {0.5f};
  std::vector<float> y(x.size());
  Node n;
  n.attrs["_prog"] = graph::Attr::of_ints({1, static_cast<int>(FusedBin::kDiv), 1, 0,
                                           static_cast<int>(Unary::kErf), -1, 1,
                                           static_cast<int>(FusedBin::kAdd), 2, 2,
                                           static_cast<int>(FusedBin::kMul), 0, 1,
                                           static_cast<int>(FusedBin::kMul), 3});
  n.attrs["_params"] = graph::Attr::of_floats(std::vector<double>(20, 0.0));
  n.inputs = {0, 1, 2, 3};  // x and the three constants (operand indices refer to these)
  run("FusedElementwise", "cpu", n,
      {view(x, {static_cast<int64_t>(x.size())}), view(c_sqrt2, {}), view(c_one, {}), view(c_half, {})},
      {view(y, {static_cast<int64_t>(x.size())})});
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double ref = 0.5 * x[i] * (1.0 + std::erf(x[i] / std::sqrt(2.0)));
    EXPECT_NEAR(y[i], ref, 2e-6 * (1 + std::abs(ref)));
  }
}

}  // namespace
}  // namespace xpuruntime::cpu
