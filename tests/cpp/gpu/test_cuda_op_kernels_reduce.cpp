// The CUDA Softmax/LogSoftmax, reduction, global pooling and CumSum kernels
// against float64 host references: every axis, long and short rows, NaN and -inf,
// reduced axes adjacent or not (the workspace path), keepdims, axes as a constant
// input, noop_with_empty_axes, empty reductions; fp32/fp16/bf16 and integers.
#include <cmath>
#include <limits>

#include "test_cuda_op_kernels_util.h"

namespace xpuruntime::cuda_op_tests {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
const std::vector<DType> kF = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

// [outer, n, inner] view of shape around axis.
void split_axis(const Shape& s, int64_t axis, int64_t& outer, int64_t& n, int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= s[static_cast<std::size_t>(d)];
  for (std::size_t d = static_cast<std::size_t>(axis) + 1; d < s.size(); ++d) inner *= s[d];
  n = s[static_cast<std::size_t>(axis)];
}

std::vector<double> softmax_ref(const HostArray& x, int64_t axis, bool log) {
  int64_t outer, n, inner;
  split_axis(x.shape, axis, outer, n, inner);
  std::vector<double> y(x.v.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t i) { return static_cast<std::size_t>((o * n + i) * inner + in); };
      double m = -kInf, s = 0;
      for (int64_t i = 0; i < n; ++i) m = std::max(m, x.v[at(i)]);
      for (int64_t i = 0; i < n; ++i) s += std::exp(x.v[at(i)] - m);
      bool nan = false;
      for (int64_t i = 0; i < n; ++i) nan = nan || std::isnan(x.v[at(i)]);
      for (int64_t i = 0; i < n; ++i) {
        const double v = x.v[at(i)];
        y[at(i)] = nan ? kNaN : (log ? v - m - std::log(s) : std::exp(v - m) / s);
      }
    }
  return y;
}

TEST_F(CudaOpTest, SoftmaxAndLogSoftmaxEveryAxis) {
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {{4, 10}, -1},  {{3, 1000}, 1}, {{2, 1025}, -1}, {{1, 5000}, -1}, {{6, 7, 9}, 1},
      {{6, 7, 9}, 0}, {{33}, 0},      {{0, 16}, -1},   {{5, 1}, -1},    {{2, 3, 4, 5}, 2}};
  for (DType t : kF) {
    for (const auto& [shape, axis] : cases) {
      HostArray x = random_array(rng, t, shape, -8, 8);
      const int64_t a = axis < 0 ? axis + static_cast<int64_t>(shape.size()) : axis;
      for (bool log : {false, true}) {
        const std::string op = log ? "LogSoftmax" : "Softmax";
        auto out = run({op, {{"axis", Attr::of_int(axis)}}, {x}, {}, {{t, shape}}});
        if (out.empty()) return;
        // Outputs in [0, 1] (softmax) or of magnitude ~10 (log-softmax): the 16-bit
        // output rounding dominates; relative to max(1, |want|).
        expect_close(out[0], softmax_ref(x, a, log),
                     op + " " + shape_text(shape) + " axis " + std::to_string(axis));
      }
    }
  }
}

TEST_F(CudaOpTest, SoftmaxMasksAndNaN) {
  // -inf entries (attention masks) give exact zeros; a NaN poisons its row only.
  HostArray x = make_array(DType::kFloat32, {3, 4},
                           {1, -kInf, 2, -kInf, kNaN, 0, 1, 2, -kInf, -kInf, -kInf, 3});
  auto out = run({"Softmax", {}, {x}, {}, {{DType::kFloat32, {3, 4}}}});
  if (out.empty()) return;
  const double e = std::exp(1.0);
  expect_close(out[0], {1 / (1 + e), 0, e / (1 + e), 0, kNaN, kNaN, kNaN, kNaN, 0, 0, 0, 1},
               "Softmax -inf and NaN");
  // The same along axis 0 (the column kernel): a NaN anywhere in a column poisons it,
  // -inf gives 0.
  HostArray xc = make_array(DType::kFloat32, {4, 2}, {-kInf, 1, 0, 2, 0, kNaN, 0, 3});
  auto oc = run({"Softmax", {{"axis", Attr::of_int(0)}}, {xc}, {}, {{DType::kFloat32, {4, 2}}}});
  expect_close(oc[0], {0, kNaN, 1.0 / 3, kNaN, 1.0 / 3, kNaN, 1.0 / 3, kNaN}, "Softmax axis 0 NaN");
}

struct ReduceCase {
  std::string op;
  std::function<double(const std::vector<double>&)> ref;
  bool positive = false;  // inputs > 0 (Prod keeps magnitudes sane)
};

std::vector<ReduceCase> reduce_cases() {
  auto sum = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s;
  };
  return {
      {"ReduceSum", sum},
      {"ReduceMean",
       [sum](const std::vector<double>& v) { return v.empty() ? kNaN : sum(v) / v.size(); }},
      {"ReduceMax",
       [](const std::vector<double>& v) {
         double m = -kInf;
         for (double x : v) m = std::isnan(x) || std::isnan(m) ? kNaN : std::max(m, x);
         return m;
       }},
      {"ReduceMin",
       [](const std::vector<double>& v) {
         double m = kInf;
         for (double x : v) m = std::isnan(x) || std::isnan(m) ? kNaN : std::min(m, x);
         return m;
       }},
      {"ReduceProd",
       [](const std::vector<double>& v) {
         double p = 1;
         for (double x : v) p *= x;
         return p;
       },
       true},
      {"ReduceL1",
       [](const std::vector<double>& v) {
         double s = 0;
         for (double x : v) s += std::fabs(x);
         return s;
       }},
      {"ReduceL2",
       [](const std::vector<double>& v) {
         double s = 0;
         for (double x : v) s += x * x;
         return std::sqrt(s);
       }},
      {"ReduceSumSquare",
       [](const std::vector<double>& v) {
         double s = 0;
         for (double x : v) s += x * x;
         return s;
       }},
      {"ReduceLogSumExp",
       [](const std::vector<double>& v) {
         double m = -kInf;
         for (double x : v) m = std::max(m, x);
         double s = 0;
         for (double x : v) s += std::exp(x - m);
         return m + std::log(s);
       }},
  };
}

// The reference over any axes; returns values in row-major order of the kept dims.
std::vector<double> reduce_ref(const HostArray& x, const std::vector<int64_t>& axes,
                               const ReduceCase& rc) {
  const std::size_t r = x.shape.size();
  std::vector<bool> red(r, axes.empty());
  for (int64_t a : axes)
    red[static_cast<std::size_t>(a < 0 ? a + static_cast<int64_t>(r) : a)] = true;
  Shape kept;
  for (std::size_t d = 0; d < r; ++d) kept.push_back(red[d] ? 1 : x.shape[d]);
  std::vector<std::vector<double>> groups(static_cast<std::size_t>(graph::shape_numel(kept)));
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rem = i, o = 0, stride = 1;
    for (std::size_t d = r; d-- > 0;) {
      const int64_t c = rem % x.shape[d];
      rem /= x.shape[d];
      if (!red[d]) o += c * stride;
      stride *= kept[d];
    }
    groups[static_cast<std::size_t>(o)].push_back(x.v[static_cast<std::size_t>(i)]);
  }
  std::vector<double> y;
  for (const auto& g : groups) y.push_back(rc.ref(g));
  return y;
}

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& axes, bool keep) {
  Shape out;
  for (std::size_t d = 0; d < s.size(); ++d) {
    bool red = axes.empty();
    for (int64_t a : axes)
      red = red || static_cast<std::size_t>(a < 0 ? a + static_cast<int64_t>(s.size()) : a) == d;
    if (!red)
      out.push_back(s[d]);
    else if (keep)
      out.push_back(1);
  }
  return out;
}

TEST_F(CudaOpTest, ReductionsOverAnyAxes) {
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {{4, 37}, {1}},      {{4, 3000}, {-1}},      {{6, 5, 7}, {1}},   {{6, 5, 7}, {0}},
      {{6, 5, 7}, {0, 2}}, {{2, 3, 4, 5}, {1, 3}}, {{2, 3, 4, 5}, {}}, {{3, 1, 5}, {1, 2}},
      {{2, 0, 3}, {1}},    {{16, 2049}, {1}}};
  for (const ReduceCase& rc : reduce_cases()) {
    for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      for (const auto& [shape, axes] : cases) {
        HostArray x = random_array(rng, t, shape, rc.positive ? 0.9 : -2, rc.positive ? 1.1 : 2);
        for (bool keep : {true, false}) {
          const Shape os = reduced_shape(shape, axes, keep);
          // Opset 18 form: axes as a constant int64 input.
          OpCall c{rc.op, {{"keepdims", Attr::of_int(keep ? 1 : 0)}}, {x}, {}, {{t, os}}};
          if (!axes.empty()) {
            c.inputs.push_back(make_array(DType::kInt64, {static_cast<int64_t>(axes.size())},
                                          std::vector<double>(axes.begin(), axes.end())));
            c.constant = {false, true};
          }
          auto out = run(c);
          if (out.empty()) return;
          // Long sums in fp32 against float64: allow growth with the count.
          const double n =
              static_cast<double>(x.numel()) / std::max<double>(1, graph::shape_numel(os));
          const double tol =
              tolerance(t) * (t == DType::kFloat32 ? std::max(1.0, std::sqrt(n)) : 1.0) *
              (rc.op == "ReduceSum" || rc.op == "ReduceSumSquare" || rc.op == "ReduceL1" ? 4 : 1);
          expect_close(out[0], reduce_ref(x, axes, rc),
                       rc.op + " " + shape_text(shape) + " keepdims " + std::to_string(keep), tol);
        }
      }
    }
  }
}

TEST_F(CudaOpTest, ReductionAttributesIntegersAndNaN) {
  HostArray x = random_array(rng, DType::kFloat32, {3, 4, 5}, -2, 2);
  // opset 13: axes as an attribute.
  auto a = run({"ReduceSum",
                {{"axes", Attr::of_ints({0, 2})}, {"keepdims", Attr::of_int(0)}},
                {x},
                {},
                {{DType::kFloat32, {4}}}});
  if (a.empty()) return;
  expect_close(a[0], reduce_ref(x, {0, 2}, reduce_cases()[0]), "ReduceSum axes attribute");
  // noop_with_empty_axes: the identity.
  auto b = run({"ReduceMax",
                {{"noop_with_empty_axes", Attr::of_int(1)}},
                {x},
                {},
                {{DType::kFloat32, {3, 4, 5}}}});
  expect_close(b[0], x.v, "ReduceMax noop_with_empty_axes");
  // Integers accumulate in int64 (exact); NaN wins in Max/Min.
  HostArray xi = random_array(rng, DType::kInt32, {7, 300}, -1000, 1000);
  for (const char* op : {"ReduceSum", "ReduceMax", "ReduceMin"}) {
    ReduceCase rc;
    for (const ReduceCase& c : reduce_cases())
      if (c.op == op) rc = c;
    auto o = run({op,
                  {{"axes", Attr::of_ints({1})}, {"keepdims", Attr::of_int(0)}},
                  {xi},
                  {},
                  {{DType::kInt32, {7}}}});
    expect_close(o[0], reduce_ref(xi, {1}, rc), std::string(op) + " int32", 0);
  }
  HostArray xn = make_array(DType::kFloat32, {2, 3}, {1, kNaN, 3, 4, 5, 6});
  auto mx = run({"ReduceMax",
                 {{"axes", Attr::of_ints({1})}, {"keepdims", Attr::of_int(0)}},
                 {xn},
                 {},
                 {{DType::kFloat32, {2}}}});
  expect_close(mx[0], {kNaN, 6}, "ReduceMax NaN propagates");
  for (const char* op : {"ReduceLogSumExp", "ReduceSum", "ReduceMin"}) {
    auto o = run({op,
                  {{"axes", Attr::of_ints({1})}, {"keepdims", Attr::of_int(0)}},
                  {xn},
                  {},
                  {{DType::kFloat32, {2}}}});
    ASSERT_FALSE(o.empty());
    EXPECT_TRUE(std::isnan(o[0].v[0])) << op << " lost the NaN of row 0: " << o[0].v[0];
    EXPECT_FALSE(std::isnan(o[0].v[1])) << op << " row 1 has no NaN";
  }
  // Global pools: a mean / max per (n, c).
  HostArray p = random_array(rng, DType::kFloat16, {2, 3, 5, 7}, -2, 2);
  for (const auto& [op, red] : std::vector<std::pair<std::string, std::string>>{
           {"GlobalAveragePool", "ReduceMean"}, {"GlobalMaxPool", "ReduceMax"}}) {
    ReduceCase rc;
    for (const ReduceCase& c : reduce_cases())
      if (c.op == red) rc = c;
    auto o = run({op, {}, {p}, {}, {{DType::kFloat16, {2, 3, 1, 1}}}});
    expect_close(o[0], reduce_ref(p, {2, 3}, rc), op);
  }
}

TEST_F(CudaOpTest, CumSumAxisExclusiveReverse) {
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kInt64, DType::kInt32}) {
    for (const auto& [shape, axis] : std::vector<std::pair<Shape, int64_t>>{
             {{10}, 0}, {{3, 300}, 1}, {{4, 5, 6}, 1}, {{4, 5, 6}, -3}, {{0, 4}, 1}}) {
      HostArray x = random_array(rng, t, shape, is_float(t) ? -1 : -50, is_float(t) ? 1 : 50);
      const int64_t a = axis < 0 ? axis + static_cast<int64_t>(shape.size()) : axis;
      int64_t outer, n, inner;
      split_axis(shape, a, outer, n, inner);
      for (int mode = 0; mode < 4; ++mode) {
        const bool exclusive = mode & 1, reverse = mode & 2;
        std::vector<double> want(x.v.size());
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t in = 0; in < inner; ++in) {
            double acc = 0;
            for (int64_t k = 0; k < n; ++k) {
              const int64_t i = reverse ? n - 1 - k : k;
              const std::size_t at = static_cast<std::size_t>((o * n + i) * inner + in);
              if (exclusive) {
                want[at] = acc;
                acc += x.v[at];
              } else {
                acc += x.v[at];
                want[at] = acc;
              }
            }
          }
        auto out =
            run({"CumSum",
                 {{"exclusive", Attr::of_int(exclusive)}, {"reverse", Attr::of_int(reverse)}},
                 {x, make_array(DType::kInt64, {}, {static_cast<double>(axis)})},
                 {false, true},
                 {{t, shape}}});
        if (out.empty()) return;
        // Running sums of up to 300 terms of magnitude 1: absolute error grows with n.
        expect_close(
            out[0], want, "CumSum " + shape_text(shape) + " mode " + std::to_string(mode),
            is_float(t) ? tolerance(t) * std::sqrt(static_cast<double>(std::max<int64_t>(n, 1))) * 4
                        : 0);
      }
    }
  }
}

TEST_F(CudaOpTest, AxesComputedAtRunTimeAreReadFromTheDevice) {
  // Axes (opset 18) and CumSum's axis as ordinary inputs, not plan constants.
  HostArray x = random_array(rng, DType::kFloat32, {3, 4, 5}, -2, 2);
  ReduceCase sum = reduce_cases()[0];
  auto r = run({"ReduceSum",
                {{"keepdims", Attr::of_int(0)}},
                {x, make_array(DType::kInt64, {2}, {0, -1})},
                {false, false},
                {{DType::kFloat32, {4}}}});
  if (r.empty()) return;
  expect_close(r[0], reduce_ref(x, {0, 2}, sum), "ReduceSum run-time axes", 4e-5);
  auto c = run({"CumSum",
                {},
                {x, make_array(DType::kInt32, {}, {1})},
                {false, false},
                {{DType::kFloat32, {3, 4, 5}}}});
  std::vector<double> want(x.v.size());
  for (int64_t o = 0; o < 3; ++o)
    for (int64_t in = 0; in < 5; ++in) {
      double acc = 0;
      for (int64_t k = 0; k < 4; ++k) {
        const std::size_t at = static_cast<std::size_t>((o * 4 + k) * 5 + in);
        acc += x.v[at];
        want[at] = acc;
      }
    }
  expect_close(c[0], want, "CumSum run-time axis");
}

}  // namespace
}  // namespace xpuruntime::cuda_op_tests
