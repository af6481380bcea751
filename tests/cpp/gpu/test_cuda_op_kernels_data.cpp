// The CUDA data-movement kernels against host references computed here from
// coordinates: Transpose (tiled and general permutations), Slice (negative starts
// and steps, clamping), Expand, Tile, Concat, Split, Identity, Gather (negative
// indices, out of range -> zeros), GatherElements, Pad (all four modes, negative
// pads, value input and attribute), Trilu, Range; every element size.
#include <numeric>

#include "test_cuda_op_kernels_util.h"

namespace xpuruntime::cuda_op_tests {
namespace {

const std::vector<DType> kSizes = {DType::kUInt8, DType::kFloat16, DType::kFloat32, DType::kInt64};

std::vector<int64_t> coords(int64_t i, const Shape& s) {
  std::vector<int64_t> c(s.size());
  for (std::size_t d = s.size(); d-- > 0;) {
    c[d] = i % s[d];
    i /= s[d];
  }
  return c;
}
int64_t linear(const std::vector<int64_t>& c, const Shape& s) {
  int64_t i = 0;
  for (std::size_t d = 0; d < s.size(); ++d) i = i * s[d] + c[d];
  return i;
}
// Distinct values per element (exact in every dtype of the test: < 256 distinct
// small integers for uint8, exact integers below 2048 for fp16).
HostArray iota(DType t, const Shape& s) {
  HostArray a{t, s, {}};
  for (int64_t i = 0; i < a.numel(); ++i)
    a.v.push_back(static_cast<double>(i % (t == DType::kUInt8 ? 251 : 2039)));
  return a;
}

TEST_F(CudaOpTest, TransposeTiledAndGeneral) {
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {{{37, 65}, {1, 0}},
                                                                     {{3, 33, 31}, {0, 2, 1}},
                                                                     {{2, 3, 4, 5}, {0, 2, 1, 3}},
                                                                     {{2, 3, 4, 5}, {3, 1, 0, 2}},
                                                                     {{4, 5, 6}, {}},
                                                                     {{1, 70, 1, 40}, {0, 3, 2, 1}},
                                                                     {{0, 3}, {1, 0}}};
  for (DType t : kSizes) {
    for (const auto& [s, perm0] : cases) {
      std::vector<int64_t> perm = perm0;
      if (perm.empty())
        for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) perm.push_back(d);
      Shape os;
      for (int64_t p : perm) os.push_back(s[static_cast<std::size_t>(p)]);
      HostArray x = iota(t, s);
      std::vector<double> want(x.v.size());
      for (int64_t i = 0; i < graph::shape_numel(os); ++i) {
        const auto oc = coords(i, os);
        std::vector<int64_t> ic(s.size());
        for (std::size_t d = 0; d < perm.size(); ++d) ic[static_cast<std::size_t>(perm[d])] = oc[d];
        want[static_cast<std::size_t>(i)] = x.v[static_cast<std::size_t>(linear(ic, s))];
      }
      std::map<std::string, Attr> attrs;
      if (!perm0.empty()) attrs["perm"] = Attr::of_ints(perm0);
      auto out = run({"Transpose", attrs, {x}, {}, {{t, os}}});
      if (out.empty()) return;
      expect_close(out[0], want, "Transpose " + shape_text(s), 0);
    }
  }
}

TEST_F(CudaOpTest, SliceNegativeStepsAndClamping) {
  struct C {
    Shape s;
    std::vector<int64_t> starts, ends, axes, steps;
  };
  const std::vector<C> cases = {{{10, 8}, {2, 1}, {7, 100}, {0, 1}, {1, 2}},
                                {{10, 8}, {-1}, {-11}, {0}, {-1}},  // full reverse of axis 0
                                {{10, 8}, {-3}, {1000}, {1}, {1}},
                                {{4, 5, 6}, {5, 0}, {0, 6}, {2, -2}, {-2, 3}},
                                {{4, 5, 6}, {1}, {1}, {0}, {1}},  // empty result
                                {{7}, {100}, {-100}, {0}, {-3}}};
  for (DType t : kSizes) {
    for (const C& c : cases) {
      HostArray x = iota(t, c.s);
      // Reference: numpy-style index lists per dim.
      std::vector<std::vector<int64_t>> idx(c.s.size());
      for (std::size_t d = 0; d < c.s.size(); ++d) {
        idx[d].resize(static_cast<std::size_t>(c.s[d]));
        std::iota(idx[d].begin(), idx[d].end(), 0);
      }
      for (std::size_t i = 0; i < c.starts.size(); ++i) {
        const std::size_t d = static_cast<std::size_t>(
            c.axes[i] < 0 ? c.axes[i] + static_cast<int64_t>(c.s.size()) : c.axes[i]);
        const int64_t dim = c.s[d], step = c.steps[i];
        int64_t st = c.starts[i] < 0 ? c.starts[i] + dim : c.starts[i];
        int64_t en = c.ends[i] < 0 ? c.ends[i] + dim : c.ends[i];
        if (step > 0) {
          st = std::clamp<int64_t>(st, 0, dim);
          en = std::clamp<int64_t>(en, 0, dim);
        } else {
          st = std::clamp<int64_t>(st, -1, dim - 1);
          en = std::clamp<int64_t>(en, -1, dim - 1);
        }
        idx[d].clear();
        for (int64_t k = st; step > 0 ? k < en : k > en; k += step) idx[d].push_back(k);
      }
      Shape os;
      for (const auto& v : idx) os.push_back(static_cast<int64_t>(v.size()));
      std::vector<double> want;
      for (int64_t i = 0; i < graph::shape_numel(os); ++i) {
        const auto oc = coords(i, os);
        std::vector<int64_t> ic(c.s.size());
        for (std::size_t d = 0; d < c.s.size(); ++d)
          ic[d] = idx[d][static_cast<std::size_t>(oc[d])];
        want.push_back(x.v[static_cast<std::size_t>(linear(ic, c.s))]);
      }
      auto ints = [](const std::vector<int64_t>& v) {
        return make_array(DType::kInt64, {static_cast<int64_t>(v.size())},
                          std::vector<double>(v.begin(), v.end()));
      };
      // Starts/ends/axes/steps as plan constants, then as run-time inputs.
      for (bool constant : {true, false}) {
        auto out = run({"Slice",
                        {},
                        {x, ints(c.starts), ints(c.ends), ints(c.axes), ints(c.steps)},
                        {false, constant, constant, constant, constant},
                        {{t, os}}});
        if (out.empty()) return;
        expect_close(out[0], want,
                     "Slice " + shape_text(c.s) + " -> " + shape_text(os) +
                         (constant ? " (constants)" : " (run-time inputs)"),
                     0);
      }
    }
  }
}

TEST_F(CudaOpTest, ExpandTileIdentity) {
  for (DType t : kSizes) {
    for (const auto& [s, os] : std::vector<std::pair<Shape, Shape>>{{{3, 1}, {2, 3, 4}},
                                                                    {{1}, {5, 7}},
                                                                    {{4}, {3, 4}},
                                                                    {{2, 1, 3}, {2, 5, 3}},
                                                                    {{3}, {0, 3}}}) {
      HostArray x = iota(t, s);
      std::vector<double> want;
      for (int64_t i = 0; i < graph::shape_numel(os); ++i) want.push_back(bcast_at(x, os, i));
      auto out = run({"Expand",
                      {},
                      {x, make_array(DType::kInt64, {static_cast<int64_t>(os.size())},
                                     std::vector<double>(os.begin(), os.end()))},
                      {false, true},
                      {{t, os}}});
      if (out.empty()) return;
      expect_close(out[0], want, "Expand " + shape_text(s) + " -> " + shape_text(os), 0);
    }
    for (const auto& [s, reps] : std::vector<std::pair<Shape, std::vector<int64_t>>>{
             {{2, 3}, {2, 3}}, {{5}, {4}}, {{2, 1, 3}, {1, 4, 2}}, {{3, 2}, {0, 1}}}) {
      HostArray x = iota(t, s);
      Shape os;
      for (std::size_t d = 0; d < s.size(); ++d) os.push_back(s[d] * reps[d]);
      std::vector<double> want;
      for (int64_t i = 0; i < graph::shape_numel(os); ++i) {
        auto c = coords(i, os);
        for (std::size_t d = 0; d < s.size(); ++d) c[d] %= s[d];
        want.push_back(x.v[static_cast<std::size_t>(linear(c, s))]);
      }
      auto out = run({"Tile",
                      {},
                      {x, make_array(DType::kInt64, {static_cast<int64_t>(reps.size())},
                                     std::vector<double>(reps.begin(), reps.end()))},
                      {false, true},
                      {{t, os}}});
      expect_close(out[0], want, "Tile " + shape_text(s) + " -> " + shape_text(os), 0);
    }
    HostArray x = iota(t, {3, 17});
    auto id = run({"Identity", {}, {x}, {}, {{t, {3, 17}}}});
    expect_close(id[0], x.v, "Identity", 0);
  }
}

TEST_F(CudaOpTest, ConcatAndSplit) {
  for (DType t : kSizes) {
    for (int64_t axis : {0, 1, -1}) {
      const std::vector<Shape> parts =
          axis == 0   ? std::vector<Shape>{{2, 3, 4}, {1, 3, 4}, {0, 3, 4}, {3, 3, 4}}
          : axis == 1 ? std::vector<Shape>{{2, 1, 4}, {2, 5, 4}, {2, 0, 4}}
                      : std::vector<Shape>{{2, 3, 1}, {2, 3, 7}};
      const std::size_t a = static_cast<std::size_t>(axis < 0 ? axis + 3 : axis);
      Shape os = parts[0];
      os[a] = 0;
      for (const Shape& p : parts) os[a] += p[a];
      std::vector<std::optional<HostArray>> ins;
      for (const Shape& p : parts) {
        HostArray h = random_array(rng, t, p, 0, 200);
        ins.push_back(h);
      }
      std::vector<double> want;
      for (int64_t i = 0; i < graph::shape_numel(os); ++i) {
        auto c = coords(i, os);
        std::size_t k = 0;
        while (c[a] >= parts[k][a]) c[a] -= parts[k++][a];
        want.push_back(ins[k]->v[static_cast<std::size_t>(linear(c, parts[k]))]);
      }
      auto out = run({"Concat", {{"axis", Attr::of_int(axis)}}, ins, {}, {{t, os}}});
      if (out.empty()) return;
      expect_close(out[0], want, "Concat axis " + std::to_string(axis), 0);
      // Split the concatenation back into the parts (sizes from the output shapes).
      HostArray whole{t, os, want};
      std::vector<std::pair<DType, Shape>> outs;
      for (const Shape& p : parts) outs.emplace_back(t, p);
      std::vector<double> sizes;
      for (const Shape& p : parts) sizes.push_back(static_cast<double>(p[a]));
      auto back =
          run({"Split",
               {{"axis", Attr::of_int(axis)}},
               {whole, make_array(DType::kInt64, {static_cast<int64_t>(sizes.size())}, sizes)},
               {false, true},
               outs});
      for (std::size_t k = 0; k < parts.size() && k < back.size(); ++k)
        expect_close(back[k], ins[k]->v,
                     "Split part " + std::to_string(k) + " axis " + std::to_string(axis), 0);
    }
  }
}

// One launch per 32 inputs: a DenseNet-like channels-last concat of 37 pieces (a wide
// first piece, then 32-channel ones: 16-byte units in fp16), and pieces of odd widths
// (byte units), against the element-by-element concatenation.
TEST_F(CudaOpTest, ConcatOfManyPiecesInBatchedLaunches) {
  for (DType t : {DType::kFloat16, DType::kFloat32}) {
    for (bool odd : {false, true}) {
      std::vector<Shape> parts = {{2, 5, 3, odd ? 7 : 64}};
      for (int k = 0; k < 36; ++k) parts.push_back({2, 5, 3, odd ? 1 + k % 5 : 32});
      Shape os = {2, 5, 3, 0};
      for (const Shape& p : parts) os[3] += p[3];
      std::vector<std::optional<HostArray>> ins;
      for (const Shape& p : parts) ins.push_back(random_array(rng, t, p, -10, 10));
      std::vector<double> want;
      for (int64_t i = 0; i < graph::shape_numel(os); ++i) {
        auto c = coords(i, os);
        std::size_t k = 0;
        while (c[3] >= parts[k][3]) c[3] -= parts[k++][3];
        want.push_back(ins[k]->v[static_cast<std::size_t>(linear(c, parts[k]))]);
      }
      auto out = run({"Concat", {{"axis", Attr::of_int(3)}}, ins, {}, {{t, os}}});
      if (out.empty()) return;
      expect_close(out[0], want, std::string("Concat of 37 pieces") + (odd ? " (odd widths)" : ""),
                   0);
    }
  }
}

TEST_F(CudaOpTest, GatherAndGatherElements) {
  for (DType t : kSizes) {
    for (DType it : {DType::kInt64, DType::kInt32}) {
      HostArray data = iota(t, {5, 6, 7});
      for (int64_t axis : {0, 1, 2, -1}) {
        const std::size_t a = static_cast<std::size_t>(axis < 0 ? axis + 3 : axis);
        const int64_t n = data.shape[a];
        HostArray idx = make_array(
            it, {2, 3}, {0, -1, 2, static_cast<double>(n - 1), -static_cast<double>(n), 1});
        Shape os;
        for (std::size_t d = 0; d < a; ++d) os.push_back(data.shape[d]);
        os.insert(os.end(), idx.shape.begin(), idx.shape.end());
        for (std::size_t d = a + 1; d < 3; ++d) os.push_back(data.shape[d]);
        std::vector<double> want;
        for (int64_t i = 0; i < graph::shape_numel(os); ++i) {
          const auto oc = coords(i, os);
          std::vector<int64_t> dc;
          for (std::size_t d = 0; d < a; ++d) dc.push_back(oc[d]);
          int64_t k = static_cast<int64_t>(idx.v[static_cast<std::size_t>(oc[a] * 3 + oc[a + 1])]);
          dc.push_back(k < 0 ? k + n : k);
          for (std::size_t d = a + 2; d < oc.size(); ++d) dc.push_back(oc[d]);
          want.push_back(data.v[static_cast<std::size_t>(linear(dc, data.shape))]);
        }
        auto out = run({"Gather", {{"axis", Attr::of_int(axis)}}, {data, idx}, {}, {{t, os}}});
        if (out.empty()) return;
        expect_close(out[0], want, "Gather axis " + std::to_string(axis), 0);

        // GatherElements: indices of shape [5, 4, 7] (axis dim may differ).
        Shape is = data.shape;
        is[a] = 4;
        HostArray ge = random_array(rng, it, is, -n, n - 1);
        std::vector<double> gw;
        for (int64_t i = 0; i < ge.numel(); ++i) {
          auto c = coords(i, is);
          const int64_t k = static_cast<int64_t>(ge.v[static_cast<std::size_t>(i)]);
          c[a] = k < 0 ? k + n : k;
          gw.push_back(data.v[static_cast<std::size_t>(linear(c, data.shape))]);
        }
        auto o2 =
            run({"GatherElements", {{"axis", Attr::of_int(axis)}}, {data, ge}, {}, {{t, is}}});
        expect_close(o2[0], gw, "GatherElements axis " + std::to_string(axis), 0);
      }
    }
  }
  // Out-of-range indices write zeros (documented: a kernel cannot raise).
  HostArray data = make_array(DType::kFloat32, {4}, {1, 2, 3, 4});
  auto o = run({"Gather",
                {},
                {data, make_array(DType::kInt64, {3}, {1, 4, -5})},
                {},
                {{DType::kFloat32, {3}}}});
  if (!o.empty()) expect_close(o[0], {2, 0, 0}, "Gather out of range", 0);
}

TEST_F(CudaOpTest, PadEveryModeAndTrilu) {
  for (DType t : kSizes) {
    const Shape s = {3, 4, 5};
    HostArray x = iota(t, s);
    for (const std::string mode : {"constant", "reflect", "edge", "wrap"}) {
      for (const std::vector<int64_t>& pads : std::vector<std::vector<int64_t>>{
               {0, 1, 2, 1, 0, 3}, {1, 0, 0, 0, 2, 1}, {0, -1, 1, 0, 1, -2}, {2, 3, 3, 2, 3, 3}}) {
        if (mode == "reflect" && (pads[1] > 3 || pads[4] > 3)) continue;  // reflect needs pad < dim
        Shape os;
        for (std::size_t d = 0; d < 3; ++d) os.push_back(s[d] + pads[d] + pads[d + 3]);
        const double cv = t == DType::kUInt8 ? 7 : -7;
        std::vector<double> want;
        for (int64_t i = 0; i < graph::shape_numel(os); ++i) {
          auto c = coords(i, os);
          bool outside = false;
          for (std::size_t d = 0; d < 3; ++d) {
            int64_t k = c[d] - pads[d];
            const int64_t n = s[d];
            if (k < 0 || k >= n) {
              if (mode == "constant")
                outside = true;
              else if (mode == "edge")
                k = k < 0 ? 0 : n - 1;
              else if (mode == "wrap")
                k = ((k % n) + n) % n;
              else {
                while (k < 0 || k >= n) k = k < 0 ? -k : 2 * (n - 1) - k;
              }
            }
            c[d] = k;
          }
          want.push_back(outside ? cv : x.v[static_cast<std::size_t>(linear(c, s))]);
        }
        auto out =
            run({"Pad",
                 {{"mode", Attr::of_string(mode)}},
                 {x, make_array(DType::kInt64, {6}, std::vector<double>(pads.begin(), pads.end())),
                  make_array(t, {}, {cv})},
                 {false, true, false},
                 {{t, os}}});
        if (out.empty()) return;
        expect_close(out[0], want, "Pad " + mode + " " + shape_text(os), 0);
      }
    }
    for (int64_t k : {0, 1, -2, 9}) {
      for (bool upper : {true, false}) {
        const Shape ts = {2, 5, 7};
        HostArray y = iota(t, ts);
        std::vector<double> want;
        for (int64_t i = 0; i < y.numel(); ++i) {
          const auto c = coords(i, ts);
          const bool keep = upper ? c[2] - c[1] >= k : c[2] - c[1] <= k;
          want.push_back(keep ? y.v[static_cast<std::size_t>(i)] : 0);
        }
        // k as a plan constant for k >= 0, as a run-time input otherwise.
        auto out = run({"Trilu",
                        {{"upper", Attr::of_int(upper)}},
                        {y, make_array(DType::kInt64, {}, {static_cast<double>(k)})},
                        {false, k >= 0},
                        {{t, ts}}});
        if (out.empty()) return;
        expect_close(out[0], want,
                     "Trilu k " + std::to_string(k) + " upper " + std::to_string(upper), 0);
      }
    }
  }
  // Pad attribute value (opset 2 form) and pads given only for some axes (opset 18).
  HostArray x = iota(DType::kFloat32, {2, 3});
  auto out = run({"Pad",
                  {{"pads", Attr::of_ints({1, 0, 0, 1})}, {"value", Attr::of_float(2.5)}},
                  {x},
                  {},
                  {{DType::kFloat32, {3, 4}}}});
  if (!out.empty())
    expect_close(out[0], {2.5, 2.5, 2.5, 2.5, 0, 1, 2, 2.5, 3, 4, 5, 2.5}, "Pad value attribute",
                 0);
  auto ax = run({"Pad",
                 {},
                 {x, make_array(DType::kInt64, {2}, {2, 1}), std::nullopt,
                  make_array(DType::kInt64, {1}, {-1})},
                 {false, false, false, false},
                 {{DType::kFloat32, {2, 6}}}});
  // pads and axes as run-time inputs (read from the device).
  if (!ax.empty()) expect_close(ax[0], {0, 0, 0, 1, 2, 0, 0, 0, 3, 4, 5, 0}, "Pad axes input", 0);
}

TEST_F(CudaOpTest, RangeFloatAndInt) {
  for (DType t : {DType::kFloat32, DType::kInt64, DType::kInt32, DType::kFloat64}) {
    const double start = is_float(t) ? 1.5 : -7, delta = is_float(t) ? 0.25 : 3;
    const int64_t n = 1000;
    std::vector<double> want;
    for (int64_t i = 0; i < n; ++i) want.push_back(start + static_cast<double>(i) * delta);
    auto out = run({"Range",
                    {},
                    {make_array(t, {}, {start}), make_array(t, {}, {start + n * delta}),
                     make_array(t, {}, {delta})},
                    {},
                    {{t, {n}}}});
    if (out.empty()) return;
    expect_close(out[0], want, "Range", 0);
  }
}

TEST_F(CudaOpTest, ViewCopiesShapeAndSize) {
  HostArray x = iota(DType::kFloat16, {2, 3, 4});
  for (const auto& [op, os] :
       std::vector<std::pair<std::string, Shape>>{{"Reshape", {6, 4}},
                                                  {"Flatten", {2, 12}},
                                                  {"Squeeze", {2, 3, 4}},
                                                  {"Unsqueeze", {2, 1, 3, 4}}}) {
    auto out = run({op, {}, {x}, {}, {{DType::kFloat16, os}}});
    if (out.empty()) return;
    expect_close(out[0], x.v, op + " copy", 0);
  }
  HostArray y = random_array(rng, DType::kFloat32, {5, 1, 7, 2});
  auto all = run({"Shape", {}, {y}, {}, {{DType::kInt64, {4}}}});
  if (all.empty()) return;
  expect_close(all[0], {5, 1, 7, 2}, "Shape", 0);
  auto part = run({"Shape",
                   {{"start", Attr::of_int(-3)}, {"end", Attr::of_int(3)}},
                   {y},
                   {},
                   {{DType::kInt64, {2}}}});
  expect_close(part[0], {1, 7}, "Shape start=-3 end=3", 0);
  auto size = run({"Size", {}, {y}, {}, {{DType::kInt64, {}}}});
  expect_close(size[0], {70}, "Size", 0);
}

}  // namespace
}  // namespace xpuruntime::cuda_op_tests
