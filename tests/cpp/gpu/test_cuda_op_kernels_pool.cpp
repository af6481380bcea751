// The CUDA MaxPool / AveragePool / BatchNormalization / ConstantOfShape / Dropout
// kernels against host references written from the ONNX definitions: 1-3 spatial
// dims, strides, dilations, explicit and SAME pads, ceil_mode, count_include_pad.
#include <cmath>

#include "test_cuda_op_kernels_util.h"

namespace xpuruntime::cuda_op_tests {
namespace {

struct PoolCase {
  Shape x;                             // [N, C, spatial...]
  std::vector<int64_t> k, s, d, pads;  // pads: begins then ends
  bool ceil = false;
  std::string auto_pad = "NOTSET";
};

// Output sizes and begin/end pads per spatial dim, from the ONNX formulas.
void geometry(const PoolCase& c, std::vector<int64_t>& out, std::vector<int64_t>& pb,
              std::vector<int64_t>& pe) {
  const std::size_t r = c.k.size();
  out.assign(r, 0);
  pb.assign(r, 0);
  pe.assign(r, 0);
  for (std::size_t i = 0; i < r; ++i) {
    const int64_t in = c.x[2 + i], s = c.s.empty() ? 1 : c.s[i], d = c.d.empty() ? 1 : c.d[i];
    const int64_t ext = (c.k[i] - 1) * d + 1;
    if (c.auto_pad == "SAME_UPPER" || c.auto_pad == "SAME_LOWER") {
      out[i] = (in + s - 1) / s;
      const int64_t total = std::max<int64_t>((out[i] - 1) * s + ext - in, 0);
      pb[i] = c.auto_pad == "SAME_UPPER" ? total / 2 : (total + 1) / 2;
      pe[i] = total - pb[i];
    } else {
      pb[i] = c.pads.empty() ? 0 : c.pads[i];
      pe[i] = c.pads.empty() ? 0 : c.pads[r + i];
      const int64_t span = in + pb[i] + pe[i] - ext;
      out[i] = (c.ceil ? (span + s - 1) / s : span / s) + 1;
      // A last window starting inside the end pad is dropped (ceil_mode rule).
      if (c.ceil && (out[i] - 1) * s >= in + pb[i]) --out[i];
    }
  }
}

std::vector<double> pool_ref(const HostArray& x, const PoolCase& c, bool is_max, bool include_pad,
                             const std::vector<int64_t>& out, const std::vector<int64_t>& pb,
                             const std::vector<int64_t>& pe) {
  const std::size_t r = c.k.size();
  const int64_t planes = c.x[0] * c.x[1];
  int64_t in_sz = 1, out_sz = 1, k_sz = 1;
  for (std::size_t i = 0; i < r; ++i) {
    in_sz *= c.x[2 + i];
    out_sz *= out[i];
    k_sz *= c.k[i];
  }
  std::vector<double> y;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t o = 0; o < out_sz; ++o) {
      std::vector<int64_t> oc(r);
      for (std::size_t i = r, rem = static_cast<std::size_t>(o); i-- > 0;) {
        oc[i] = static_cast<int64_t>(rem) % out[i];
        rem /= static_cast<std::size_t>(out[i]);
      }
      double best = -INFINITY, sum = 0;
      int64_t cnt = 0, cnt_pad = 0;
      bool any = false;
      for (int64_t kk = 0; kk < k_sz; ++kk) {
        int64_t rem = kk, off = 0;
        bool inside = true, in_pad = true;
        std::vector<int64_t> kc(r);
        for (std::size_t i = r; i-- > 0;) {
          kc[i] = rem % c.k[i];
          rem /= c.k[i];
        }
        for (std::size_t i = 0; i < r; ++i) {
          const int64_t s = c.s.empty() ? 1 : c.s[i], d = c.d.empty() ? 1 : c.d[i];
          const int64_t pos = oc[i] * s - pb[i] + kc[i] * d;
          if (pos >= c.x[2 + i] + pe[i]) in_pad = false;
          if (pos < 0 || pos >= c.x[2 + i]) inside = false;
          off = off * c.x[2 + i] + pos;
        }
        if (in_pad) ++cnt_pad;
        if (!inside) continue;
        const double v = x.v[static_cast<std::size_t>(p * in_sz + off)];
        if (!any || v > best) best = v;
        any = true;
        sum += v;
        ++cnt;
      }
      const int64_t div = include_pad ? cnt_pad : cnt;
      y.push_back(is_max ? best : (div > 0 ? sum / static_cast<double>(div) : 0));
    }
  return y;
}

TEST_F(CudaOpTest, MaxAndAveragePool) {
  const std::vector<PoolCase> cases = {
      {{2, 3, 9, 11}, {3, 3}, {2, 2}, {}, {1, 1, 1, 1}},
      {{1, 2, 8, 8}, {2, 2}, {2, 2}, {}, {}},
      {{1, 2, 7, 10}, {3, 2}, {2, 3}, {2, 1}, {0, 1, 1, 0}},
      {{1, 1, 10, 10}, {3, 3}, {3, 3}, {}, {}, true},
      {{2, 2, 13}, {4}, {3}, {}, {2, 1}},
      {{1, 2, 5, 6, 7}, {2, 3, 2}, {1, 2, 2}, {}, {0, 1, 0, 1, 1, 1}},
      {{1, 3, 9, 9}, {3, 3}, {2, 2}, {}, {}, false, "SAME_UPPER"},
      {{1, 3, 8, 9}, {2, 3}, {2, 2}, {}, {}, false, "SAME_LOWER"},
      // PoolFormer's token mixer (3x3, stride 1, pad 1) on rows wider than one block.
      {{2, 3, 9, 150}, {3, 3}, {1, 1}, {}, {1, 1, 1, 1}},
      // Uneven pads with a stride above the window, and a 1-D window with dilation.
      {{1, 2, 6, 40}, {2, 2}, {3, 3}, {}, {0, 1, 1, 1}},
      {{2, 2, 70}, {3}, {2}, {3}, {2, 2}}};
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (const PoolCase& c : cases) {
      HostArray x = random_array(rng, t, c.x, -4, 4);
      std::vector<int64_t> out, pb, pe;
      geometry(c, out, pb, pe);
      Shape os = {c.x[0], c.x[1]};
      os.insert(os.end(), out.begin(), out.end());
      std::map<std::string, Attr> attrs = {{"kernel_shape", Attr::of_ints(c.k)}};
      if (!c.s.empty()) attrs["strides"] = Attr::of_ints(c.s);
      if (!c.d.empty()) attrs["dilations"] = Attr::of_ints(c.d);
      if (!c.pads.empty()) attrs["pads"] = Attr::of_ints(c.pads);
      if (c.ceil) attrs["ceil_mode"] = Attr::of_int(1);
      if (c.auto_pad != "NOTSET") attrs["auto_pad"] = Attr::of_string(c.auto_pad);
      const std::string what = shape_text(c.x) + " k" + shape_text(c.k) + " " + c.auto_pad;
      auto mx = run({"MaxPool", attrs, {x}, {}, {{t, os}}});
      if (mx.empty()) return;
      expect_close(mx[0], pool_ref(x, c, true, false, out, pb, pe), "MaxPool " + what, 0);
      if (!c.d.empty()) continue;  // AveragePool dilations need opset 19; covered by MaxPool
      for (bool include : {false, true}) {
        auto attrs2 = attrs;
        attrs2["count_include_pad"] = Attr::of_int(include);
        auto av = run({"AveragePool", attrs2, {x}, {}, {{t, os}}});
        expect_close(av[0], pool_ref(x, c, false, include, out, pb, pe),
                     "AveragePool " + what + " count_include_pad " + std::to_string(include));
      }
    }
  }
}

TEST_F(CudaOpTest, BatchNormalizationInference) {
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (const Shape& s : std::vector<Shape>{{2, 3, 4, 5}, {4, 7}, {1, 16, 33}}) {
      const int64_t c = s[1];
      HostArray x = random_array(rng, t, s, -3, 3), scale = random_array(rng, t, {c}, 0.5, 2),
                bias = random_array(rng, t, {c}, -1, 1), mean = random_array(rng, t, {c}, -1, 1),
                var = random_array(rng, t, {c}, 0.2, 3);
      const double eps = 1e-3;
      const int64_t inner = x.numel() / (s[0] * c);
      std::vector<double> want;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const std::size_t ch = static_cast<std::size_t>((i / inner) % c);
        want.push_back((x.v[static_cast<std::size_t>(i)] - mean.v[ch]) * scale.v[ch] /
                           std::sqrt(var.v[ch] + eps) +
                       bias.v[ch]);
      }
      auto out = run({"BatchNormalization",
                      {{"epsilon", Attr::of_float(eps)}},
                      {x, scale, bias, mean, var},
                      {},
                      {{t, s}}});
      if (out.empty()) return;
      expect_close(out[0], want, "BatchNormalization " + shape_text(s));
    }
  }
}

TEST_F(CudaOpTest, ConstantOfShapeAndDropout) {
  graph::HostTensor v = graph::HostTensor::alloc(DType::kFloat16, {1});
  v.ptr<uint16_t>()[0] = matmul::float_to_half(-2.5f);
  auto c = run({"ConstantOfShape",
                {{"value", Attr::of_tensor(v)}},
                {make_array(DType::kInt64, {2}, {3, 5})},
                {true},
                {{DType::kFloat16, {3, 5}}}});
  if (c.empty()) return;
  expect_close(c[0], std::vector<double>(15, -2.5), "ConstantOfShape value", 0);
  auto z = run({"ConstantOfShape",
                {},
                {make_array(DType::kInt64, {1}, {7})},
                {true},
                {{DType::kFloat32, {7}}}});
  expect_close(z[0], std::vector<double>(7, 0), "ConstantOfShape default", 0);
  HostArray x = random_array(rng, DType::kFloat32, {4, 9});
  auto d = run({"Dropout", {}, {x}, {}, {{DType::kFloat32, {4, 9}}, {DType::kBool, {4, 9}}}});
  expect_close(d[0], x.v, "Dropout output", 0);
  expect_close(d[1], std::vector<double>(36, 1), "Dropout mask", 0);
}

}  // namespace
}  // namespace xpuruntime::cuda_op_tests
