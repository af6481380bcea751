// The CUDA elementwise op kernels (cpp/src/backends/cuda/kernels/elementwise)
// against float64 host references: every unary op, Clip, every binary op with
// numpy broadcasting (dense, scalar, general collapsed strides, empty, odd sizes),
// Min/Max/Sum/Mean over 1..5 inputs, Cast between every dtype pair, Where;
// NaN propagation as the ONNX reference; supports() refusals with reason codes.
#include <cmath>
#include <functional>
#include <limits>

#include "test_cuda_op_kernels_util.h"

namespace xpuruntime::cuda_op_tests {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const std::vector<DType> kF = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
const std::vector<Shape> kUnaryShapes = {{0}, {1}, {7}, {1031}, {3, 257}, {2, 3, 4, 5}};

struct UnaryCase {
  std::string op;
  std::function<double(double)> ref;
  double lo, hi;
  std::map<std::string, Attr> attrs;
  std::vector<DType> dtypes = kF;
};

double gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

std::vector<UnaryCase> unary_cases() {
  const std::vector<DType> fi = {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                                 DType::kInt32,   DType::kInt8,    DType::kInt64};
  return {
      {"Neg", [](double x) { return -x; }, -3, 3, {}, fi},
      {"Abs", [](double x) { return std::fabs(x); }, -3, 3, {}, fi},
      {"Relu", [](double x) { return x < 0 ? 0 : x; }, -3, 3, {}, fi},
      {"Sign", [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }, -3, 3, {}, fi},
      {"Sqrt", [](double x) { return std::sqrt(x); }, 0.01, 9},
      {"Exp", [](double x) { return std::exp(x); }, -5, 5},
      {"Log", [](double x) { return std::log(x); }, 0.01, 9},
      {"Erf", [](double x) { return std::erf(x); }, -3, 3},
      {"Tanh", [](double x) { return std::tanh(x); }, -4, 4},
      {"Sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }, -8, 8},
      {"LeakyRelu",
       [](double x) { return x < 0 ? 0.1 * x : x; },
       -3,
       3,
       {{"alpha", Attr::of_float(0.1)}}},
      {"HardSigmoid",
       [](double x) { return std::clamp(0.3 * x + 0.4, 0.0, 1.0); },
       -4,
       4,
       {{"alpha", Attr::of_float(0.3)}, {"beta", Attr::of_float(0.4)}}},
      {"HardSwish", [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); }, -5, 5},
      {"Gelu", gelu, -4, 4},
      {"Gelu",
       [](double x) {
         return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
       },
       -4,
       4,
       {{"approximate", Attr::of_string("tanh")}}},
      {"Reciprocal", [](double x) { return 1 / x; }, 0.25, 4},
      {"Floor", [](double x) { return std::floor(x); }, -5, 5},
      {"Ceil", [](double x) { return std::ceil(x); }, -5, 5},
      {"Round", [](double x) { return std::nearbyint(x); }, -5, 5},
      {"Sin", [](double x) { return std::sin(x); }, -3, 3},
      {"Cos", [](double x) { return std::cos(x); }, -3, 3},
      {"Softplus", [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); }, -10, 25},
      {"Elu",
       [](double x) { return x < 0 ? 0.7 * std::expm1(x) : x; },
       -3,
       3,
       {{"alpha", Attr::of_float(0.7)}}},
  };
}

TEST_F(CudaOpTest, UnaryOpsMatchFloat64) {
  for (const UnaryCase& uc : unary_cases()) {
    for (DType t : uc.dtypes) {
      for (const Shape& shape : kUnaryShapes) {
        const bool integral = !is_float(t);
        HostArray x = random_array(rng, t, shape, integral ? -100 : uc.lo, integral ? 100 : uc.hi);
        if (t == DType::kInt8) x = random_array(rng, t, shape, -127, 127);
        OpCall c{uc.op, uc.attrs, {x}, {}, {{t, shape}}};
        auto out = run(c);
        if (out.empty()) return;
        std::vector<double> want;
        for (double v : x.v) want.push_back(uc.ref(v));
        expect_close(out[0], want, uc.op + " " + shape_text(shape));
      }
    }
  }
}

TEST_F(CudaOpTest, UnaryNaNAndSpecialValuesFollowOnnx) {
  // Relu, LeakyRelu and Sign pass NaN (numpy); Round is half to even.
  for (DType t : kF) {
    HostArray x = make_array(t, {6}, {kNaN, -1.5, 0.5, 1.5, 2.5, -2.5});
    auto relu = run({"Relu", {}, {x}, {}, {{t, {6}}}});
    if (relu.empty()) return;
    expect_close(relu[0], {kNaN, 0, 0.5, 1.5, 2.5, 0}, "Relu with NaN");
    auto sign = run({"Sign", {}, {x}, {}, {{t, {6}}}});
    expect_close(sign[0], {kNaN, -1, 1, 1, 1, -1}, "Sign with NaN");
    auto round = run({"Round", {}, {x}, {}, {{t, {6}}}});
    expect_close(round[0], {kNaN, -2, 0, 2, 2, -2}, "Round half to even");
  }
  // Integer Neg/Abs wrap at the minimum like numpy.
  HostArray m = make_array(DType::kInt8, {3}, {-128, 127, 0});
  auto neg = run({"Neg", {}, {m}, {}, {{DType::kInt8, {3}}}});
  if (!neg.empty()) expect_close(neg[0], {-128, -127, 0}, "Neg int8 wraps");
}

TEST_F(CudaOpTest, ClipWithInputsAttributesAndNaN) {
  for (DType t :
       {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32, DType::kUInt8}) {
    const bool integral = !is_float(t);
    HostArray x = random_array(rng, t, {4, 33}, integral ? 0 : -5, integral ? 200 : 5);
    const double lo = integral ? 20 : -1.5, hi = integral ? 150 : 2.25;
    HostArray lo_a = make_array(t, {}, {lo}), hi_a = make_array(t, {}, {hi});
    std::vector<double> both, only_hi;
    for (double v : x.v) {
      both.push_back(std::clamp(v, lo, hi));
      only_hi.push_back(std::min(v, hi));
    }
    auto o1 = run({"Clip", {}, {x, lo_a, hi_a}, {}, {{t, x.shape}}});
    if (o1.empty()) return;
    expect_close(o1[0], both, "Clip(x, min, max)");
    auto o2 = run({"Clip", {}, {x, std::nullopt, hi_a}, {}, {{t, x.shape}}});
    expect_close(o2[0], only_hi, "Clip(x, , max)");
    auto o3 = run({"Clip", {}, {x}, {}, {{t, x.shape}}});
    expect_close(o3[0], x.v, "Clip(x) is the identity");
  }
  HostArray n = make_array(DType::kFloat32, {3}, {kNaN, -9, 9});
  auto o = run({"Clip",
                {{"min", Attr::of_float(-1)}, {"max", Attr::of_float(1)}},
                {n},
                {},
                {{DType::kFloat32, {3}}}});
  if (!o.empty()) expect_close(o[0], {kNaN, -1, 1}, "Clip attributes (opset 6), NaN passes");
}

struct BinaryCase {
  std::string op;
  std::function<double(double, double)> ref;
  std::vector<DType> dtypes;
  bool compare = false;
};

double int_div(double a, double b) { return b == 0 ? 0 : std::trunc(a / b); }
double int_mod(double a, double b) {
  if (b == 0) return 0;
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
double nan_max(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b);
}
double nan_min(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b);
}

const std::vector<std::pair<Shape, Shape>> kBinaryShapes = {
    {{2, 3, 4}, {2, 3, 4}},
    {{1031}, {1031}},
    {{2, 3, 4}, {4}},
    {{5, 1, 7}, {1, 6, 1}},
    {{}, {3, 5}},
    {{3, 5}, {}},
    {{0, 3}, {3}},
    {{4, 1, 3, 2}, {3, 1}},
    {{2, 65, 33}, {2, 1, 33}},
    // A per-channel operand over rows of >= 128 (the row-broadcast kernel): on either
    // side, vectorized (136 = 17 x 8) and not (130), [C, 1] and [N, C, 1].
    {{2, 3, 136}, {3, 1}},
    {{3, 1}, {2, 3, 130}},
    {{2, 3, 1}, {2, 3, 136}}};

TEST_F(CudaOpTest, BinaryOpsBroadcastLikeNumpy) {
  const std::vector<DType> ints = {DType::kInt32, DType::kInt64, DType::kInt8, DType::kUInt8};
  std::vector<DType> all = kF;
  all.insert(all.end(), ints.begin(), ints.end());
  const std::vector<BinaryCase> cases = {
      {"Add", [](double a, double b) { return a + b; }, all},
      {"Sub", [](double a, double b) { return a - b; }, kF},
      {"Mul", [](double a, double b) { return a * b; }, all},
      {"Div", [](double a, double b) { return a / b; }, kF},
      {"Div", int_div, {DType::kInt32, DType::kInt64}},
      {"Mod", int_mod, {DType::kInt32, DType::kInt64}},
      {"Max", nan_max, all},
      {"Min", nan_min, all},
      {"Equal", [](double a, double b) { return double(a == b); }, all, true},
      {"Less", [](double a, double b) { return double(a < b); }, all, true},
      {"Greater", [](double a, double b) { return double(a > b); }, all, true},
      {"LessOrEqual", [](double a, double b) { return double(a <= b); }, all, true},
      {"GreaterOrEqual", [](double a, double b) { return double(a >= b); }, all, true},
  };
  for (const BinaryCase& bc : cases) {
    for (DType t : bc.dtypes) {
      for (const auto& [sa, sb] : kBinaryShapes) {
        const bool integral = !is_float(t);
        const double lo = t == DType::kUInt8 ? 0 : (integral ? -9 : -3), hi = integral ? 9 : 3;
        HostArray a = random_array(rng, t, sa, lo, hi), b = random_array(rng, t, sb, lo, hi);
        if (integral && b.numel() > 0 && bc.op == "Div") b.v[0] = 0;  // x / 0 is defined as 0
        const Shape os = broadcast({sa, sb});
        const DType ot = bc.compare ? DType::kBool : t;
        auto out = run({bc.op, {}, {a, b}, {}, {{ot, os}}});
        if (out.empty()) return;
        std::vector<double> want;
        for (int64_t i = 0; i < graph::shape_numel(os); ++i) {
          double w = bc.ref(bcast_at(a, os, i), bcast_at(b, os, i));
          if (integral && !bc.compare && t == DType::kUInt8)
            w = std::fmod(std::fmod(w, 256) + 256, 256);
          if (integral && !bc.compare && t == DType::kInt8)
            w = std::fmod(std::fmod(w + 128, 256) + 256, 256) - 128;
          want.push_back(w);
        }
        // Integer math exact; fp16/bf16 outputs of a fp32 result: their own rounding.
        expect_close(out[0], want, bc.op + " " + shape_text(sa) + " x " + shape_text(sb));
      }
    }
  }
}

TEST_F(CudaOpTest, FloatModPowAndLogic) {
  for (DType t : kF) {
    HostArray a = random_array(rng, t, {3, 40}, -6, 6), b = random_array(rng, t, {40}, 0.5, 3);
    for (int64_t i = 0; i < 40; i += 2)
      b.v[static_cast<std::size_t>(i)] = -b.v[static_cast<std::size_t>(i)];
    const Shape os = {3, 40};
    std::vector<double> fm, pm;
    for (int64_t i = 0; i < 120; ++i) {
      const double x = bcast_at(a, os, i), y = bcast_at(b, os, i);
      fm.push_back(std::fmod(x, y));
      double r = std::fmod(x, y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      pm.push_back(r);
    }
    auto f = run({"Mod", {{"fmod", Attr::of_int(1)}}, {a, b}, {}, {{t, os}}});
    if (f.empty()) return;
    // fmod of exactly representable operands is exact; the tolerance covers the
    // 16-bit output rounding.
    expect_close(f[0], fm, "Mod fmod=1");
    auto p = run({"Mod", {}, {a, b}, {}, {{t, os}}});
    expect_close(p[0], pm, "Mod fmod=0 (sign of the divisor)");

    HostArray base = random_array(rng, t, {5, 17}, 0.5, 2),
              ex = random_array(rng, t, {5, 17}, -2, 2);
    std::vector<double> pw;
    for (std::size_t i = 0; i < base.v.size(); ++i) pw.push_back(std::pow(base.v[i], ex.v[i]));
    auto o = run({"Pow", {}, {base, ex}, {}, {{t, {5, 17}}}});
    expect_close(o[0], pw, "Pow tensor exponent");
    for (double e : {2.0, 3.0, 0.5, -1.25}) {
      // A constant scalar exponent of another dtype (int64 / fp32) runs the unary path.
      const DType et = e == std::floor(e) ? DType::kInt64 : DType::kFloat32;
      HostArray ea = make_array(et, {}, {e});
      std::vector<double> want;
      for (double v : base.v) want.push_back(std::pow(v, e));
      auto q = run({"Pow", {}, {base, ea}, {false, true}, {{t, {5, 17}}}});
      expect_close(q[0], want, "Pow constant scalar exponent " + std::to_string(e));
    }
  }
  HostArray a = random_array(rng, DType::kBool, {4, 9}), b = random_array(rng, DType::kBool, {9});
  const Shape os = {4, 9};
  for (const auto& [op, f] : std::vector<std::pair<std::string, std::function<bool(bool, bool)>>>{
           {"And", [](bool x, bool y) { return x && y; }},
           {"Or", [](bool x, bool y) { return x || y; }},
           {"Xor", [](bool x, bool y) { return x != y; }},
           {"Equal", [](bool x, bool y) { return x == y; }}}) {
    std::vector<double> want;
    for (int64_t i = 0; i < 36; ++i)
      want.push_back(f(bcast_at(a, os, i) != 0, bcast_at(b, os, i) != 0));
    auto o = run({op, {}, {a, b}, {}, {{DType::kBool, os}}});
    if (o.empty()) return;
    expect_close(o[0], want, op + " bool");
  }
  HostArray n = make_array(DType::kBool, {5}, {0, 1, 1, 0, 1});
  auto o = run({"Not", {}, {n}, {}, {{DType::kBool, {5}}}});
  if (!o.empty()) expect_close(o[0], {1, 0, 0, 1, 0}, "Not");
}

TEST_F(CudaOpTest, VariadicMinMaxSumMean) {
  const std::vector<Shape> shapes = {{2, 3, 5}, {5}, {2, 1, 5}, {1, 3, 1}, {}};
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32}) {
    for (std::size_t n = 1; n <= shapes.size(); ++n) {
      std::vector<std::optional<HostArray>> ins;
      std::vector<Shape> ss;
      for (std::size_t k = 0; k < n; ++k) {
        ins.push_back(
            random_array(rng, t, shapes[k], is_float(t) ? -3 : -50, is_float(t) ? 3 : 50));
        ss.push_back(shapes[k]);
      }
      if (t == DType::kFloat32 && n >= 2) ins[1]->v[0] = kNaN;  // Max/Min propagate NaN
      const Shape os = broadcast(ss);
      for (const std::string op : {"Sum", "Mean", "Max", "Min"}) {
        std::vector<double> want;
        for (int64_t i = 0; i < graph::shape_numel(os); ++i) {
          double acc = bcast_at(*ins[0], os, i);
          for (std::size_t k = 1; k < n; ++k) {
            const double v = bcast_at(*ins[k], os, i);
            acc = op == "Max" ? nan_max(acc, v) : op == "Min" ? nan_min(acc, v) : acc + v;
          }
          if (op == "Mean")
            acc = is_float(t) ? acc / static_cast<double>(n)
                              : std::trunc(acc / static_cast<double>(n));
          want.push_back(acc);
        }
        auto out = run({op, {}, ins, {}, {{t, os}}});
        if (out.empty()) return;
        // Passes of three round through the 16-bit output once per pass.
        expect_close(out[0], want, op + " of " + std::to_string(n) + " inputs",
                     is_float(t) ? 2 * tolerance(t) : 0);
      }
    }
  }
}

// The CPU kernel's Cast rules in float64: float -> int truncates, saturates, NaN
// -> 0; int -> narrower int wraps; -> bool is != 0; -> float rounds.
double cast_ref(DType from, DType to, double v) {
  if (to == DType::kBool) return v != 0 ? 1 : 0;
  if (is_float(to)) {
    if (from == DType::kFloat64 && (to == DType::kFloat16 || to == DType::kBFloat16))
      return round_to(to, static_cast<float>(v));
    return round_to(to, v);
  }
  double lo = 0, hi = 0;
  switch (to) {
    case DType::kInt8:
      lo = -128;
      hi = 127;
      break;
    case DType::kUInt8:
      lo = 0;
      hi = 255;
      break;
    case DType::kInt16:
      lo = -32768;
      hi = 32767;
      break;
    case DType::kInt32:
      lo = -2147483648.0;
      hi = 2147483647.0;
      break;
    default:
      lo = -9.2233720368547758e18;
      hi = 9.2233720368547758e18;
      break;
  }
  if (is_float(from)) {
    if (std::isnan(v)) return 0;
    return std::clamp(std::trunc(v), lo, hi);
  }
  // Integer to integer: values in range are kept; others wrap modulo 2^bits. (The
  // inputs here are small, so only targets narrower than 32 bits wrap; computing
  // v - lo in double for an int64 target would lose v below 2^63's spacing.)
  if (v >= lo && v <= hi) return v;
  const double span = hi - lo + 1;
  double w = std::fmod(v - lo, span);
  if (w < 0) w += span;
  return w + lo;
}

TEST_F(CudaOpTest, CastEveryPair) {
  const std::vector<DType> types = {
      DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64, DType::kInt8,
      DType::kUInt8,   DType::kInt16,   DType::kInt32,    DType::kInt64,   DType::kBool};
  for (DType from : types) {
    HostArray x =
        random_array(rng, from, {300}, is_float(from) ? -300 : -120, is_float(from) ? 300 : 120);
    if (from == DType::kUInt8) x = random_array(rng, from, {300}, 0, 255);
    if (is_float(from)) {
      x.v[0] = kNaN;
      x.v[1] = round_to(from, 1e30);
      x.v[2] = -0.75;
    }
    for (DType to : types) {
      auto out = run({"Cast", {{"to", Attr::of_int(0)}}, {x}, {}, {{to, {300}}}});
      if (out.empty()) return;
      std::vector<double> want;
      for (double v : x.v) want.push_back(cast_ref(from, to, v));
      expect_close(out[0], want,
                   std::string("Cast ") + std::string(dtype_name(from)) + " -> " +
                       std::string(dtype_name(to)),
                   0);
    }
  }
}

TEST_F(CudaOpTest, WhereBroadcastsEveryElementSize) {
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kInt64, DType::kBool}) {
    for (const auto& [sc, sx, sy] :
         std::vector<std::tuple<Shape, Shape, Shape>>{{{3, 4}, {3, 4}, {3, 4}},
                                                      {{4}, {3, 1}, {}},
                                                      {{2, 1, 5}, {1, 3, 5}, {2, 3, 1}},
                                                      {{0, 2}, {2}, {2}}}) {
      HostArray c = random_array(rng, DType::kBool, sc), x = random_array(rng, t, sx, -9, 9),
                y = random_array(rng, t, sy, -9, 9);
      const Shape os = broadcast({sc, sx, sy});
      std::vector<double> want;
      for (int64_t i = 0; i < graph::shape_numel(os); ++i)
        want.push_back(bcast_at(c, os, i) != 0 ? bcast_at(x, os, i) : bcast_at(y, os, i));
      auto out = run({"Where", {}, {c, x, y}, {}, {{t, os}}});
      if (out.empty()) return;
      expect_close(out[0], want, "Where " + shape_text(sc) + shape_text(sx) + shape_text(sy), 0);
    }
  }
}

// supports() refusals need the plugin's registration, not a device.
class CudaOpSupports : public ::testing::Test {
 public:
  void SetUp() override {
    DeviceManager::instance().get_device_count();  // loads the plugin where it exists
    if (DeviceManager::instance().backend_or_null(DeviceKind::named("cuda")) == nullptr)
      GTEST_SKIP() << "the CUDA plugin is not loaded: "
                   << DeviceManager::instance().accelerator_unavailable_reason();
  }
  static Support check(const OpCall& c, std::vector<Shape> strides = {}) {
    OpContext ctx = context_of(c, Device::parse("cuda:0"), 90);
    for (std::size_t i = 0; i < strides.size(); ++i) ctx.inputs[i].strides = strides[i];
    KernelPtr k = CudaOpTest::kernel_for(ctx.op);
    if (!k) return Support::no("missing", "kernel not registered");
    return KernelRegistry::check(*k, ctx);
  }
};

TEST_F(CudaOpSupports, RefusalsCarryReasonCodes) {
  auto f32 = [](Shape s) { return HostArray{DType::kFloat32, std::move(s), {}}; };
  auto typed = [](DType t, Shape s) { return HostArray{t, std::move(s), {}}; };
  Support s = check({"Where", {}, {f32({3}), f32({3}), f32({3})}, {}, {{DType::kFloat32, {3}}}});
  EXPECT_EQ(s.reason_code, reason::kDtypeUnsupported) << s.detail;
  s = check({"Sqrt", {}, {typed(DType::kInt32, {3})}, {}, {{DType::kInt32, {3}}}});
  EXPECT_EQ(s.reason_code, reason::kDtypeUnsupported) << s.detail;
  s = check({"Cast", {}, {f32({3})}, {}, {{DType::kFloat8E4M3, {3}}}});
  EXPECT_EQ(s.reason_code, reason::kDtypeUnsupported) << s.detail;
  s = check({"Pow", {}, {typed(DType::kInt32, {3}), f32({3})}, {}, {{DType::kInt32, {3}}}});
  EXPECT_EQ(s.reason_code, reason::kDtypeUnsupported) << s.detail;
  // Alternating broadcast patterns cannot collapse: rank 9 after collapsing.
  const Shape a = {2, 1, 2, 1, 2, 1, 2, 1, 2}, b = {1, 3, 1, 3, 1, 3, 1, 3, 1};
  s = check({"Add", {}, {f32(a), f32(b)}, {}, {{DType::kFloat32, broadcast({a, b})}}});
  EXPECT_EQ(s.reason_code, reason::kShapeUnsupported) << s.detail;
  // A transposed (non-dense) input.
  s = check({"Relu", {}, {f32({4, 3})}, {}, {{DType::kFloat32, {4, 3}}}}, {{1, 4}});
  EXPECT_EQ(s.reason_code, reason::kLayoutUnsupported) << s.detail;
  // Accepted cases say yes.
  s = check({"Add", {}, {f32({2, 3}), f32({3})}, {}, {{DType::kFloat32, {2, 3}}}});
  EXPECT_TRUE(s.ok) << s.reason_code << ": " << s.detail;
}

}  // namespace
}  // namespace xpuruntime::cuda_op_tests
