// The CUDA kernels of the ops the CPU engine gained for default exports (issue 15
// §2): IsNaN and IsInf (every float dtype, detect_positive / detect_negative),
// GatherND (batch_dims, negative indices, int32/int64, constant and run-time
// indices), ScatterND and ScatterElements (every reduction, duplicate indices
// applied in order as the CPU kernel does, every axis), InstanceNormalization
// (fp32/fp16/bf16/fp64, a large common offset), Resize (nearest and linear, the
// common coordinate transformations and nearest modes, scales or sizes, constant
// or run-time; cubic and antialiased downsampling refused). References are
// computed here in float64 from coordinates; an out-of-range index must be an
// InvalidArgumentError whether the indices are plan constants or computed at run
// time.
#include <cmath>
#include <limits>
#include <numeric>

#include "test_cuda_op_kernels_util.h"

namespace xpuruntime::cuda_op_tests {
namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const std::vector<DType> kFloats = {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                                    DType::kFloat64};

std::vector<int64_t> coords_of(int64_t i, const Shape& s) {
  std::vector<int64_t> c(s.size());
  for (std::size_t d = s.size(); d-- > 0;) {
    c[d] = i % s[d];
    i /= s[d];
  }
  return c;
}

int64_t linear_of(const std::vector<int64_t>& c, const Shape& s) {
  int64_t i = 0;
  for (std::size_t d = 0; d < s.size(); ++d) i = i * s[d] + c[d];
  return i;
}

// Random indices in [-dim, dim) per tuple entry (dims[k] for entry k of a tuple
// of dims.size() entries), as an int array of shape s.
HostArray random_indices(std::mt19937_64& rng, DType t, const Shape& s, const Shape& dims) {
  HostArray a{t, s, {}};
  for (int64_t i = 0; i < a.numel(); ++i) {
    const int64_t dim = dims[static_cast<std::size_t>(i) % dims.size()];
    std::uniform_int_distribution<int64_t> u(-dim, dim - 1);
    a.v.push_back(static_cast<double>(u(rng)));
  }
  return a;
}

double resolved(double v, int64_t dim) { return v < 0 ? v + static_cast<double>(dim) : v; }

// Runs c and expects InvalidArgumentError naming the index (from prepare or
// run).
void expect_bad_index(CudaOpTest& t, const OpCall& c, const std::string& what) {
  std::optional<CudaOpTest::Staged> st;
  try {
    st = t.stage(c);
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
    return;
  }
  ASSERT_TRUE(st.has_value()) << what;
  std::shared_ptr<Stream> stream = StreamManager::instance().create_stream(Device::parse("cuda:0"));
  st->args.stream = stream->native();
  try {
    st->kernel->run(st->args);
    stream->synchronize();
    ADD_FAILURE() << what << ": an out-of-range index raised no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos)
        << what << ": " << e.what();
  }
}

// ---- IsNaN, IsInf ----

TEST_F(CudaOpTest, IsNaNIsInfEveryFloatDtype) {
  for (DType t : kFloats) {
    for (const Shape& s : std::vector<Shape>{{0}, {1}, {1000}, {3, 17, 5}}) {
      HostArray x = random_array(rng, t, s, -1e3, 1e3);
      const double specials[] = {kNaN, kInf, -kInf, 0.0, -0.0};
      for (int64_t i = 0; i < x.numel(); i += 3)
        x.v[static_cast<std::size_t>(i)] = specials[(i / 3) % 5];
      std::vector<double> nan_want;
      for (double v : x.v) nan_want.push_back(std::isnan(v) ? 1 : 0);
      auto out = run({"IsNaN", {}, {x}, {}, {{DType::kBool, s}}});
      if (out.empty()) return;
      expect_close(out[0], nan_want, "IsNaN " + shape_text(s) + " " + std::string(dtype_name(t)));
      for (int pos : {0, 1})
        for (int neg : {0, 1}) {
          std::vector<double> want;
          for (double v : x.v) want.push_back(std::isinf(v) && (v > 0 ? pos : neg) ? 1 : 0);
          auto o =
              run({"IsInf",
                   {{"detect_positive", Attr::of_int(pos)}, {"detect_negative", Attr::of_int(neg)}},
                   {x},
                   {},
                   {{DType::kBool, s}}});
          if (o.empty()) return;
          expect_close(o[0], want,
                       "IsInf pos=" + std::to_string(pos) + " neg=" + std::to_string(neg) + " " +
                           shape_text(s) + " " + std::string(dtype_name(t)));
        }
    }
  }
}

// ---- GatherND ----

struct GatherNDCase {
  Shape data, indices;
  int64_t batch_dims;
};

TEST_F(CudaOpTest, GatherNDBatchDimsNegativeIndices) {
  const std::vector<GatherNDCase> cases = {{{5, 7}, {4, 2}, 0},          {{5, 7}, {4, 1}, 0},
                                           {{2, 3, 4}, {3, 5, 1}, 0},    {{6, 4, 3}, {6, 2, 1}, 1},
                                           {{2, 3, 4, 5}, {2, 3, 2}, 2}, {{4}, {9, 1}, 0},
                                           {{3, 4}, {0, 2}, 0}};
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kInt64, DType::kUInt8}) {
    for (DType it : {DType::kInt64, DType::kInt32}) {
      for (const GatherNDCase& c : cases) {
        HostArray data = random_array(rng, t, c.data, 0, 100);
        const int64_t last = c.indices.back(), b = c.batch_dims;
        Shape dims(c.data.begin() + b, c.data.begin() + b + last);
        HostArray idx = random_indices(rng, it, c.indices, dims);
        Shape os(c.indices.begin(), c.indices.end() - 1);
        os.insert(os.end(), c.data.begin() + b + last, c.data.end());
        int64_t per_batch = 1, inner = 1;
        for (std::size_t d = b; d + 1 < c.indices.size(); ++d) per_batch *= c.indices[d];
        for (std::size_t d = b + last; d < c.data.size(); ++d) inner *= c.data[d];
        std::vector<double> want;
        const int64_t tuples = per_batch == 0 ? 0 : idx.numel() / last;
        for (int64_t tu = 0; tu < tuples; ++tu) {
          std::vector<int64_t> dc =
              coords_of(tu / per_batch, Shape(c.data.begin(), c.data.begin() + b));
          for (int64_t k = 0; k < last; ++k)
            dc.push_back(static_cast<int64_t>(
                resolved(idx.v[static_cast<std::size_t>(tu * last + k)], dims[k])));
          for (int64_t j = 0; j < inner; ++j) {
            std::vector<int64_t> full = dc;
            const auto jc = coords_of(j, Shape(c.data.begin() + b + last, c.data.end()));
            full.insert(full.end(), jc.begin(), jc.end());
            want.push_back(data.v[static_cast<std::size_t>(linear_of(full, c.data))]);
          }
        }
        for (bool constant : {true, false}) {
          auto out = run({"GatherND",
                          {{"batch_dims", Attr::of_int(b)}},
                          {data, idx},
                          {false, constant},
                          {{t, os}}});
          if (out.empty()) return;
          expect_close(out[0], want,
                       "GatherND " + shape_text(c.data) + " " + shape_text(c.indices) +
                           " b=" + std::to_string(b) + (constant ? " (constant indices)" : ""),
                       0);
        }
      }
    }
  }
}

TEST_F(CudaOpTest, GatherNDOutOfRangeIsTypedError) {
  HostArray data = random_array(rng, DType::kFloat32, {5, 7});
  for (double bad : {5.0, -6.0, 1e9}) {
    HostArray idx = make_array(DType::kInt64, {3, 2}, {0, 1, bad, 2, 4, 6});
    for (bool constant : {true, false})
      expect_bad_index(*this,
                       {"GatherND", {}, {data, idx}, {false, constant}, {{DType::kFloat32, {3}}}},
                       "GatherND index " + std::to_string(bad));
  }
}

// ---- ScatterND, ScatterElements ----

double reduce_ref(const std::string& r, double a, double b) {
  if (r == "add") return a + b;
  if (r == "mul") return a * b;
  if (r == "max") return a < b ? b : a;
  if (r == "min") return b < a ? b : a;
  return b;
}

struct ScatterNDCase {
  Shape data, indices;
};

TEST_F(CudaOpTest, ScatterNDEveryReductionDuplicatesInOrder) {
  const std::vector<ScatterNDCase> cases = {
      {{8}, {12, 1}}, {{6, 5}, {9, 1}}, {{4, 3, 5}, {7, 2}}, {{3, 4}, {2, 3, 2}}, {{4, 6}, {0, 1}}};
  for (const std::string red : {"none", "add", "mul", "max", "min"}) {
    for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32}) {
      for (const ScatterNDCase& c : cases) {
        const int64_t last = c.indices.back();
        // At most three distinct positions per axis, so duplicates are certain;
        // each written as itself or as its negative alias (i - dim).
        HostArray data = random_array(rng, t, c.data, -2, 2);
        HostArray idx{DType::kInt64, c.indices, {}};
        for (int64_t i = 0; i < graph::shape_numel(c.indices); ++i) {
          const int64_t dim = c.data[static_cast<std::size_t>(i % last)];
          idx.v.push_back(
              static_cast<double>(rng() % static_cast<uint64_t>(std::min<int64_t>(dim, 3))) -
              ((rng() & 1) ? static_cast<double>(dim) : 0.0));
        }
        Shape us(c.indices.begin(), c.indices.end() - 1);
        us.insert(us.end(), c.data.begin() + last, c.data.end());
        HostArray upd = random_array(rng, t, us, -2, 2);
        int64_t inner = 1;
        for (std::size_t d = last; d < c.data.size(); ++d) inner *= c.data[d];
        const Shape ds = c.data;
        std::vector<double> want = data.v;
        const int64_t tuples = inner == 0 ? 0 : graph::shape_numel(us) / inner;
        for (int64_t tu = 0; tu < tuples; ++tu) {
          std::vector<int64_t> pc;
          for (int64_t k = 0; k < last; ++k)
            pc.push_back(static_cast<int64_t>(
                resolved(idx.v[static_cast<std::size_t>(tu * last + k)], ds[k])));
          pc.resize(ds.size(), 0);
          const int64_t base = linear_of(pc, ds);
          for (int64_t j = 0; j < inner; ++j) {
            double& w = want[static_cast<std::size_t>(base + j)];
            w = round_to(t, reduce_ref(red, w, upd.v[static_cast<std::size_t>(tu * inner + j)]));
          }
        }
        for (bool constant : {true, false}) {
          auto out = run({"ScatterND",
                          {{"reduction", Attr::of_string(red)}},
                          {data, idx, upd},
                          {false, constant, false},
                          {{t, ds}}});
          if (out.empty()) return;
          expect_close(out[0], want,
                       "ScatterND " + red + " " + shape_text(ds) + " " + shape_text(c.indices) +
                           (constant ? " (constant indices)" : ""));
        }
      }
    }
  }
}

struct ScatterElementsCase {
  Shape data, indices;
  int64_t axis;
};

TEST_F(CudaOpTest, ScatterElementsEveryAxisAndReduction) {
  const std::vector<ScatterElementsCase> cases = {
      {{10}, {25}, 0},           {{4, 6}, {3, 9}, 1},
      {{4, 6}, {7, 2}, 0},       {{3, 4, 5}, {2, 4, 6}, -1},
      {{3, 4, 5}, {3, 8, 5}, 1}, {{3, 4}, {3, 0}, 1}};
  for (const std::string red : {"none", "add", "mul", "max", "min"}) {
    for (DType t : {DType::kFloat32, DType::kFloat16, DType::kFloat64, DType::kInt64}) {
      for (DType it : {DType::kInt64, DType::kInt32}) {
        for (const ScatterElementsCase& c : cases) {
          const int64_t r = static_cast<int64_t>(c.data.size());
          const std::size_t axis = static_cast<std::size_t>(c.axis < 0 ? c.axis + r : c.axis);
          HostArray data = random_array(rng, t, c.data, -2, 2);
          HostArray idx = random_indices(rng, it, c.indices, {c.data[axis]});
          HostArray upd = random_array(rng, t, c.indices, -2, 2);
          std::vector<double> want = data.v;
          for (int64_t e = 0; e < idx.numel(); ++e) {
            std::vector<int64_t> cc = coords_of(e, c.indices);
            cc[axis] =
                static_cast<int64_t>(resolved(idx.v[static_cast<std::size_t>(e)], c.data[axis]));
            double& w = want[static_cast<std::size_t>(linear_of(cc, c.data))];
            w = round_to(t, reduce_ref(red, w, upd.v[static_cast<std::size_t>(e)]));
          }
          for (bool constant : {true, false}) {
            auto out = run({"ScatterElements",
                            {{"reduction", Attr::of_string(red)}, {"axis", Attr::of_int(c.axis)}},
                            {data, idx, upd},
                            {false, constant, false},
                            {{t, c.data}}});
            if (out.empty()) return;
            expect_close(out[0], want,
                         "ScatterElements " + red + " " + shape_text(c.data) + " " +
                             shape_text(c.indices) + " axis " + std::to_string(c.axis) +
                             (constant ? " (constant indices)" : ""));
          }
        }
      }
    }
  }
}

TEST_F(CudaOpTest, ScatterOutOfRangeIsTypedError) {
  HostArray data = random_array(rng, DType::kFloat32, {4, 5});
  for (double bad : {4.0, -5.0, 1e12}) {
    HostArray nd_idx = make_array(DType::kInt64, {2, 1}, {1, bad});
    HostArray nd_upd = random_array(rng, DType::kFloat32, {2, 5});
    HostArray el_idx = make_array(DType::kInt64, {1, 2}, {0, bad});
    HostArray el_upd = random_array(rng, DType::kFloat32, {1, 2});
    for (bool constant : {true, false}) {
      expect_bad_index(*this,
                       {"ScatterND",
                        {},
                        {data, nd_idx, nd_upd},
                        {false, constant, false},
                        {{DType::kFloat32, {4, 5}}}},
                       "ScatterND index " + std::to_string(bad));
      expect_bad_index(*this,
                       {"ScatterElements",
                        {{"axis", Attr::of_int(0)}},
                        {data, el_idx, el_upd},
                        {false, constant, false},
                        {{DType::kFloat32, {4, 5}}}},
                       "ScatterElements index " + std::to_string(bad));
    }
  }
}

TEST_F(CudaOpTest, ScatterWithBoolDataAndReductionIsRefused) {
  OpCall c{"ScatterND",
           {{"reduction", Attr::of_string("add")}},
           {make_array(DType::kBool, {4}, {0, 1, 0, 1}), make_array(DType::kInt64, {1, 1}, {2}),
            make_array(DType::kBool, {1}, {1})},
           {},
           {{DType::kBool, {4}}}};
  OpContext ctx = context_of(c, Device::parse("cuda:0"), capability_);
  KernelPtr k = kernel_for("scatternd");
  ASSERT_TRUE(k);
  const Support s = KernelRegistry::check(*k, ctx);
  EXPECT_FALSE(s.ok);
  EXPECT_EQ(s.reason_code, reason::kDtypeUnsupported) << s.detail;
}

// ---- InstanceNormalization ----

TEST_F(CudaOpTest, InstanceNormalizationEveryFloatDtype) {
  // {2, 1, 70001} and {3, 1, 40, 1001}: few long rows (a one-group GroupNorm), split into
  // chunks whose statistics are merged (launch_instance_norm's chunked path; 70001 leaves
  // a short last chunk).
  const std::vector<Shape> shapes = {{2, 3, 5},      {1, 4, 33, 17}, {3, 2, 4099},
                                     {2, 3, 1},      {2, 5},         {2, 1, 70001},
                                     {3, 1, 40, 1001}};
  for (DType t : kFloats) {
    for (const Shape& s : shapes) {
      for (double offset : {0.0, 50.0}) {
        const int64_t n = s[0], ch = s[1];
        const int64_t inner = graph::shape_numel(s) / (n * ch);
        HostArray x = random_array(rng, t, s, offset - 2, offset + 2);
        HostArray scale = random_array(rng, t, {ch}, -2, 2);
        HostArray bias = random_array(rng, t, {ch}, -1, 1);
        const double eps = 1e-3;
        std::vector<double> want(x.v.size());
        for (int64_t row = 0; row < n * ch; ++row) {
          double mean = 0, var = 0;
          for (int64_t i = 0; i < inner; ++i)
            mean += x.v[static_cast<std::size_t>(row * inner + i)];
          mean /= static_cast<double>(inner);
          for (int64_t i = 0; i < inner; ++i) {
            const double d = x.v[static_cast<std::size_t>(row * inner + i)] - mean;
            var += d * d;
          }
          var /= static_cast<double>(inner);
          const double sc = scale.v[static_cast<std::size_t>(row % ch)] / std::sqrt(var + eps);
          for (int64_t i = 0; i < inner; ++i) {
            const std::size_t k = static_cast<std::size_t>(row * inner + i);
            want[k] = (x.v[k] - mean) * sc + bias.v[static_cast<std::size_t>(row % ch)];
          }
        }
        auto out = run({"InstanceNormalization",
                        {{"epsilon", Attr::of_float(eps)}},
                        {x, scale, bias},
                        {false, true, true},
                        {{t, s}}});
        if (out.empty()) return;
        // fp32 statistics over values near 50 with unit spread: the output's
        // absolute error grows with the offset / spread ratio (~25 x fp32 eps).
        const double tol = t == DType::kFloat32 ? 1e-4 : (t == DType::kFloat64 ? 1e-10 : -1);
        expect_close(out[0], want,
                     "InstanceNormalization " + shape_text(s) + " offset " + std::to_string(offset),
                     tol);
      }
    }
  }
}

// ---- Resize (nearest, linear) ----

// Where output position y samples the input, by ONNX's formulas (out: the
// integer output length; the cases below use pytorch_half_pixel and
// align_corners only where it is above 1).
double resize_source(const std::string& coord, double y, double scale, int64_t in, int64_t out) {
  if (coord == "align_corners")
    return y * static_cast<double>(in - 1) / static_cast<double>(out - 1);
  if (coord == "asymmetric") return y / scale;
  return (y + 0.5) / scale - 0.5;  // half_pixel, pytorch_half_pixel (out > 1)
}

// One axis of a separable resize in float64.
std::vector<double> resize_axis_ref(const std::vector<double>& src, const Shape& s,
                                    std::size_t axis, int64_t out_w, double scale,
                                    const std::string& mode, const std::string& coord,
                                    const std::string& nearest) {
  int64_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= s[d];
  for (std::size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t in_w = s[axis];
  auto at = [&](int64_t o, int64_t k, int64_t i) {
    k = std::clamp<int64_t>(k, 0, in_w - 1);
    return src[static_cast<std::size_t>((o * in_w + k) * inner + i)];
  };
  std::vector<double> dst;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t y = 0; y < out_w; ++y)
      for (int64_t i = 0; i < inner; ++i) {
        const double x = resize_source(coord, static_cast<double>(y), scale, in_w, out_w);
        const double f = std::floor(x);
        const auto k0 = static_cast<int64_t>(f);
        if (mode == "linear") {
          const double w = x - f;
          dst.push_back((1 - w) * at(o, k0, i) + w * at(o, k0 + 1, i));
          continue;
        }
        int64_t k = k0;
        const double frac = x - f;
        if (nearest == "round_prefer_floor") k = frac <= 0.5 ? k0 : k0 + 1;
        if (nearest == "round_prefer_ceil") k = frac < 0.5 ? k0 : k0 + 1;
        if (nearest == "ceil") k = static_cast<int64_t>(std::ceil(x));
        dst.push_back(at(o, k, i));
      }
  return dst;
}

struct ResizeCase {
  Shape in, out;
  bool by_scales;  // scales input (out = floor(in * scale)) or sizes input
  std::string mode, coord, nearest;
};

TEST_F(CudaOpTest, ResizeNearestAndLinearModes) {
  const std::vector<ResizeCase> cases = {
      {{1, 2, 5, 7}, {1, 2, 10, 14}, true, "linear", "half_pixel", ""},
      {{2, 3, 6, 8}, {2, 3, 9, 4}, false, "linear", "align_corners", ""},
      {{1, 2, 6, 5}, {1, 2, 11, 3}, false, "linear", "pytorch_half_pixel", ""},
      {{1, 1, 4, 5}, {1, 1, 12, 15}, true, "nearest", "asymmetric", "floor"},
      {{1, 3, 7, 6}, {1, 3, 3, 13}, false, "nearest", "half_pixel", "round_prefer_floor"},
      {{2, 2, 5, 5}, {2, 2, 8, 7}, false, "nearest", "half_pixel", "round_prefer_ceil"},
      {{1, 2, 5, 4}, {1, 2, 10, 12}, true, "nearest", "asymmetric", "ceil"},
      {{3, 9}, {3, 4}, false, "linear", "half_pixel", ""}};
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (const ResizeCase& c : cases) {
      HostArray x = random_array(rng, t, c.in);
      std::vector<double> scales;
      for (std::size_t d = 0; d < c.in.size(); ++d)
        scales.push_back(static_cast<double>(c.out[d]) / static_cast<double>(c.in[d]));
      std::vector<double> want = x.v;
      Shape s = c.in;
      for (std::size_t d = 0; d < s.size(); ++d) {
        if (c.out[d] == s[d]) continue;
        want = resize_axis_ref(want, s, d, c.out[d], scales[d], c.mode, c.coord, c.nearest);
        s[d] = c.out[d];
      }
      std::map<std::string, Attr> attrs = {
          {"mode", Attr::of_string(c.mode)},
          {"coordinate_transformation_mode", Attr::of_string(c.coord)}};
      if (!c.nearest.empty()) attrs["nearest_mode"] = Attr::of_string(c.nearest);
      const int64_t r = static_cast<int64_t>(c.in.size());
      for (bool constant : {true, false}) {
        OpCall call{"Resize", attrs, {x, std::nullopt}, {false, false}, {{t, c.out}}};
        if (c.by_scales) {
          call.inputs.push_back(make_array(DType::kFloat32, {r}, scales));
        } else {
          call.inputs.push_back(std::nullopt);
          call.inputs.push_back(
              make_array(DType::kInt64, {r}, std::vector<double>(c.out.begin(), c.out.end())));
        }
        call.constant.resize(call.inputs.size(), false);
        call.constant.back() = constant;
        auto out = run(call);
        if (out.empty()) return;
        expect_close(out[0], want,
                     "Resize " + c.mode + " " + c.coord + " " + c.nearest + " " + shape_text(c.in) +
                         " -> " + shape_text(c.out) + (constant ? " (constant)" : " (run-time)"));
      }
    }
  }
}

TEST_F(CudaOpTest, ResizeCubicAndAntialiasedDownsamplingAreRefused) {
  KernelPtr k = kernel_for("resize");
  ASSERT_TRUE(k);
  HostArray x = random_array(rng, DType::kFloat32, {1, 1, 8, 8});
  HostArray sizes = make_array(DType::kInt64, {4}, {1, 1, 4, 4});
  for (const auto& [mode, antialias] :
       std::vector<std::pair<std::string, int>>{{"cubic", 0}, {"linear", 1}}) {
    OpCall c{"Resize",
             {{"mode", Attr::of_string(mode)}, {"antialias", Attr::of_int(antialias)}},
             {x, std::nullopt, std::nullopt, sizes},
             {false, false, false, true},
             {{DType::kFloat32, {1, 1, 4, 4}}}};
    const Support s = KernelRegistry::check(*k, context_of(c, Device::parse("cuda:0"), capability_));
    EXPECT_FALSE(s.ok) << mode;
    EXPECT_EQ(s.reason_code, reason::kAttributeUnsupported) << s.detail;
  }
}

}  // namespace
}  // namespace xpuruntime::cuda_op_tests
