// The NVRTC-compiled FusedElementwise CUDA kernel: programs with unary, binary
// and operand-on-the-left instructions over broadcast inputs (and an all-dense
// one) against float64 references; the disk cache under $XRT_CACHE_DIR: the first
// prepare writes one cubin, preparing the same program again loads it (the file is
// not rewritten) and gives the same bits, another program adds a second cubin.
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "test_cuda_op_kernels_util.h"
#include "xpuruntime/ops/elementwise_program.h"

namespace xpuruntime::cuda_op_tests {
namespace {

using ops::ElementwiseInstr;
using ops::FusedBin;
using ops::Unary;

ElementwiseInstr unary(Unary u, double alpha = 0, double lo = -INFINITY, double hi = INFINITY) {
  ElementwiseInstr i;
  i.kind = ElementwiseInstr::Kind::kUnary;
  i.unary = u;
  i.params.alpha = alpha;
  i.params.lo = lo;
  i.params.hi = hi;
  return i;
}
ElementwiseInstr binary(FusedBin b, int operand, bool left = false) {
  ElementwiseInstr i;
  i.kind = left ? ElementwiseInstr::Kind::kBinaryOperandLeft : ElementwiseInstr::Kind::kBinary;
  i.binary = b;
  i.operand = operand;
  return i;
}

OpCall fused_call(const ops::ElementwiseProgram& p, std::vector<std::optional<HostArray>> ins,
                  const Shape& out, DType t = DType::kFloat32) {
  OpCall c{"FusedElementwise", {}, std::move(ins), {}, {{t, out}}};
  p.to_attrs(c.attrs);
  return c;
}

double erf_chain(double x, double b, double s, double y) {
  double acc = (x + b) / s;
  acc = std::erf(acc);
  acc = y * acc;
  acc = std::clamp(acc, -0.5, 0.75);
  acc = std::max(acc, b);
  acc = x - acc;
  return acc < 0 ? 0.2 * acc : acc;
}

class CudaFusedTest : public CudaOpTest {
 public:
  void SetUp() override {
    CudaOpTest::SetUp();
    if (IsSkipped()) return;
    dir_ = std::filesystem::temp_directory_path() /
           ("xrt_fused_test_" +
            std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    ::setenv("XRT_CACHE_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("XRT_CACHE_DIR");
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  std::vector<std::filesystem::path> cubins() const {
    std::vector<std::filesystem::path> v;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_ / "nvrtc", ec))
      if (e.path().extension() == ".cubin") v.push_back(e.path());
    return v;
  }
  std::filesystem::path dir_;
};

TEST_F(CudaFusedTest, BroadcastChainMatchesFloat64AndReloadsFromTheDiskCache) {
  ops::ElementwiseProgram p;
  p.ops = "Add,Div,Erf,Mul,Clip,Max,Sub,LeakyRelu";
  p.instrs = {binary(FusedBin::kAdd, 1),
              binary(FusedBin::kDiv, 2),
              unary(Unary::kErf),
              binary(FusedBin::kMul, 3, /*left=*/true),
              unary(Unary::kClip, 0, -0.5, 0.75),
              binary(FusedBin::kMax, 1),
              binary(FusedBin::kSub, 0, /*left=*/true),
              unary(Unary::kLeakyRelu, 0.2)};
  const Shape os = {3, 5, 33};
  HostArray x = random_array(rng, DType::kFloat32, os, -2, 2);
  HostArray b = random_array(rng, DType::kFloat32, {33}, -1, 1);
  HostArray s = make_array(DType::kFloat32, {}, {1.41421356});
  HostArray y = random_array(rng, DType::kFloat32, {3, 1, 33}, -2, 2);
  std::vector<double> want;
  for (int64_t i = 0; i < graph::shape_numel(os); ++i)
    want.push_back(erf_chain(bcast_at(x, os, i), bcast_at(b, os, i), s.v[0], bcast_at(y, os, i)));

  auto first = run(fused_call(p, {x, b, s, y}, os));
  if (first.empty()) return;
  expect_close(first[0], want, "fused chain (compiled)");
  const auto files = cubins();
  ASSERT_EQ(files.size(), 1u) << "the first prepare did not write one cubin under " << dir_;
  struct stat before {};
  ASSERT_EQ(::stat(files[0].c_str(), &before), 0);

  auto second = run(fused_call(p, {x, b, s, y}, os));
  ASSERT_FALSE(second.empty());
  EXPECT_EQ(second[0].v, first[0].v) << "the cached cubin computes different bits";
  ASSERT_EQ(cubins().size(), 1u);
  struct stat after {};
  ASSERT_EQ(::stat(files[0].c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino) << "the cubin was rewritten instead of loaded";

  // Another parameter is another program: a second cubin.
  p.instrs.back() = unary(Unary::kLeakyRelu, 0.3);
  auto third = run(fused_call(p, {x, b, s, y}, os));
  ASSERT_FALSE(third.empty());
  EXPECT_EQ(cubins().size(), 2u);
}

TEST_F(CudaFusedTest, DenseChainWithEveryBinaryAndCommonUnaries) {
  const Shape os = {4099};
  HostArray x = random_array(rng, DType::kFloat32, os, 0.5, 2);
  HostArray y = random_array(rng, DType::kFloat32, os, 0.5, 2);
  struct Step {
    ElementwiseInstr instr;
    std::function<double(double, double)> ref;  // (acc, y)
  };
  const std::vector<Step> steps = {
      {binary(FusedBin::kMul, 1), [](double a, double v) { return a * v; }},
      {unary(Unary::kSqrt), [](double a, double) { return std::sqrt(a); }},
      {binary(FusedBin::kPow, 1), [](double a, double v) { return std::pow(a, v); }},
      {binary(FusedBin::kSub, 1, true), [](double a, double v) { return v - a; }},
      {unary(Unary::kTanh), [](double a, double) { return std::tanh(a); }},
      {binary(FusedBin::kMin, 1), [](double a, double v) { return std::min(a, v); }},
      {unary(Unary::kGelu),
       [](double a, double) { return 0.5 * a * (1 + std::erf(a / std::sqrt(2.0))); }},
      {binary(FusedBin::kDiv, 1, true), [](double a, double v) { return v / a; }},
      {unary(Unary::kSigmoid), [](double a, double) { return 1 / (1 + std::exp(-a)); }},
      {binary(FusedBin::kAdd, 1), [](double a, double v) { return a + v; }},
      {unary(Unary::kHardSwish),
       [](double a, double) { return a * std::clamp(a / 6 + 0.5, 0.0, 1.0); }},
  };
  ops::ElementwiseProgram p;
  p.ops = "chain";
  for (const Step& st : steps) p.instrs.push_back(st.instr);
  std::vector<double> want;
  for (std::size_t i = 0; i < x.v.size(); ++i) {
    double acc = x.v[i];
    for (const Step& st : steps) acc = st.ref(acc, y.v[i]);
    want.push_back(acc);
  }
  auto out = run(fused_call(p, {x, y}, os));
  if (out.empty()) return;
  // Eleven fp32 steps, each a few ulp: 1e-5 relative per the fp32 bar, times 4.
  expect_close(out[0], want, "dense fused chain", 4e-5);
}

// The vector kernels (V elements of the innermost dim per thread, one wide access
// per operand that walks it, one broadcast load per operand that does not): NCHW
// per-channel [C, 1, 1] parameters over inner sizes that take 8, 4 and 2 lanes and one
// that takes none (the general kernel), channels-last [C] rows, a dense chain, in
// fp16 and fp32, against float64 on the same rounded inputs.
TEST_F(CudaFusedTest, VectorKernelsMatchFloat64OnEveryWidthAndTheGeneralFallback) {
  ops::ElementwiseProgram p;
  p.ops = "Mul,Add,Relu,Sub";
  p.instrs = {binary(FusedBin::kMul, 1), binary(FusedBin::kAdd, 2), unary(Unary::kRelu),
              binary(FusedBin::kSub, 3, /*left=*/true)};
  struct Case {
    Shape out, param, other;
  };
  const std::vector<Case> cases = {
      {{2, 16, 56, 56}, {16, 1, 1}, {2, 16, 56, 56}},  // inner 3136: 8 lanes
      {{2, 12, 14, 14}, {12, 1, 1}, {2, 12, 14, 14}},  // inner 196: 4 lanes
      {{3, 5, 3, 6}, {5, 1, 1}, {1, 5, 3, 6}},         // inner 18: 2 lanes, `other` broadcast on N
      {{2, 8, 7, 7}, {8, 1, 1}, {2, 8, 7, 7}},         // inner 49: the general kernel
      {{2, 7, 7, 24}, {24}, {2, 7, 7, 24}},            // channels-last rows: 8 lanes
      {{4099}, {1}, {4099}},                           // dense, odd: the general kernel
      {{4096}, {4096}, {1}},                           // dense with a scalar operand
  };
  for (DType t : {DType::kFloat16, DType::kFloat32}) {
    for (const Case& c : cases) {
      HostArray x = random_array(rng, t, c.out, -2, 2);
      HostArray s = random_array(rng, t, c.param, 0.5, 1.5);
      HostArray b = random_array(rng, t, c.param, -1, 1);
      HostArray y = random_array(rng, t, c.other, -1, 1);
      std::vector<double> want;
      for (int64_t i = 0; i < graph::shape_numel(c.out); ++i) {
        const double acc =
            std::max(0.0, bcast_at(x, c.out, i) * bcast_at(s, c.out, i) + bcast_at(b, c.out, i));
        want.push_back(bcast_at(y, c.out, i) - acc);
      }
      auto out = run(fused_call(p, {x, s, b, y}, c.out, t));
      if (out.empty()) return;
      // One rounding at the store (fp16: 2^-11 relative) plus fp32 arithmetic.
      expect_close(out[0], want, "vector fused chain " + shape_text(c.out),
                   t == DType::kFloat16 ? 1e-3 : 1e-5);
    }
  }
}

}  // namespace
}  // namespace xpuruntime::cuda_op_tests
