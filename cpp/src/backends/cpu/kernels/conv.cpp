// Conv (op key `conv`), three kernels:
//   cpu_direct    2-D float32 Conv on an AVX2/FMA CPU: conv_direct.h's register
//                 tiles read the (padded, stride-phase-split) input in place of an
//                 im2col matrix; bias, residual and activation fused. Ahead of
//                 cpu_im2col by priority (measured: ResNet-18 and MobileNetV3 at
//                 batch 1, benchmarks/bench_native_cpu.py).
//   cpu_im2col    any Conv: im2col (skipped for 1×1/stride 1/no pad) then GEMM
//                 through the matmul kernel the dispatcher chose for its GEMM
//                 (a sub-kernel from PrepareContext::prepare_sub); bias,
//                 residual and activation in one epilogue. float32 runs tiled
//                 (conv_im2col_f32), float64 as one GEMM per image and group.
//   cpu_depthwise 2-D depthwise Conv (group == C): float32 through the AVX2 plane
//                 kernel of conv_kernels.h (padded, stride-phase-split rows, output
//                 rows in registers, epilogue fused); otherwise direct loops per
//                 channel plane, one pass per kernel tap. Far faster than im2col
//                 there (im2col would run C GEMMs with M = 1).
// Fused epilogue (ops::Epilogue): a residual (input 3, added before the activation,
// the ResNet one) and an activation.
// Branch-free float code (clamps, selects) vectorizes only when comparisons may be
// speculated; results are identical, only FP exception flags could differ. Before
// every include so inline helpers share these options and stay inlinable.
#pragma GCC optimize("no-trapping-math")
#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels/conv_direct.h"
#include "backends/cpu/kernels/conv_kernels.h"
#include "backends/cpu/kernels/epilogue.h"
#include "backends/cpu/kernels/gemm_call.h"
#include "backends/cpu/kernels/spatial.h"
#include "backends/cpu/kernels/parallel.h"
#include "backends/cpu/kernels/isa_clones.h"

namespace xpuruntime::cpu {
namespace {

Spatial as3d(Spatial g) {
  while (g.rank() < 3) {
    g.in.insert(g.in.begin(), 1);
    g.out.insert(g.out.begin(), 1);
    g.k.insert(g.k.begin(), 1);
    g.s.insert(g.s.begin(), 1);
    g.d.insert(g.d.begin(), 1);
    g.pb.insert(g.pb.begin(), 0);
    g.pe.insert(g.pe.begin(), 0);
  }
  return g;
}

// A Conv node's attributes and fused epilogue, parsed once per plan step.
struct ConvStep {
  ConvAttrs attrs;
  ops::Epilogue epilogue;
  static ConvStep from_node(const Node& n) {
    return {ConvAttrs::from_node(n), ops::Epilogue::from_node(n)};
  }
};

// Bias, residual and activation over the output planes of all images.
template <typename T>
void conv_epilogue(const ConvStep& s, const std::vector<TensorView>& in, TensorView& y) {
  const int64_t nb = y.shape[0], m = y.shape[1];
  const int64_t plane = nb * m != 0 ? y.numel() / (nb * m) : 0;
  const T* bias = in.size() > 2 && in[2].data ? in[2].ptr<const T>() : nullptr;
  const T* sum = s.epilogue.residual && in.size() > 3 ? in[3].ptr<const T>() : nullptr;
  const Unary k = s.epilogue.activation;
  const UnaryParams& p = s.epilogue.params;
  const bool act = s.epilogue.has_activation();
  if (!bias && !sum && !act) return;
  T* py = y.ptr<T>();
parallel_for(nb * m, y.numel(), [&](int64_t q_begin, int64_t q_end) XRT_ISA_LAMBDA {
  for (int64_t q = q_begin; q < q_end; ++q) {
      T* yp = py + q * plane;
      const T b = bias ? bias[q % m] : T(0);
      if (sum) {
        const T* sp = sum + q * plane;
        for (int64_t i = 0; i < plane; ++i) yp[i] += b + sp[i];
      } else if (bias) {
        for (int64_t i = 0; i < plane; ++i) yp[i] += b;
      }
      if (act) {
        if (k == Unary::kRelu) {
          for (int64_t i = 0; i < plane; ++i) yp[i] = yp[i] < T(0) ? T(0) : yp[i];  // NaN stays
        } else {
          // The vectorized activation loops (one instantiation per kind); nested in
          // this parallel loop they run on the calling thread.
          run_unary(k, p, y.dtype, yp, yp, plane);
        }
      }
  }
});
}

// Columns [c0, c1) of the im2col matrix (rows: channel × kernel tap, columns:
// output positions) into col, a [rows × (c1 - c0)] row-major block.
template <typename T>
void im2col(const T* x, int64_t channels, const Spatial& g, T* col, int64_t c0, int64_t c1) {
  const int64_t kp = g.k_size(), in_sz = g.in_size();
  const int64_t rows = channels * kp, width = c1 - c0;
  parallel_for(rows, rows * width, [&](int64_t r_begin, int64_t r_end) XRT_ISA_LAMBDA {
    for (int64_t r = r_begin; r < r_end; ++r) {
      const int64_t c = r / kp, kk = r % kp;
      const int64_t k2 = kk % g.k[2], k1 = (kk / g.k[2]) % g.k[1], k0 = kk / (g.k[2] * g.k[1]);
      const T* xc = x + c * in_sz;
      T* dst = col + r * width - c0;  // indexed by absolute output position
      const int64_t off = k2 * g.d[2] - g.pb[2];
      int64_t o = c0;
      while (o < c1) {
        // One run along the innermost output dim: o = (o0 * out1 + o1) * out2 + o2.
        const int64_t o2 = o % g.out[2], o01 = o / g.out[2];
        const int64_t o1 = o01 % g.out[1], o0 = o01 / g.out[1];
        const int64_t run = std::min(c1 - o, g.out[2] - o2);
        const int64_t i0 = o0 * g.s[0] - g.pb[0] + k0 * g.d[0];
        const int64_t i1 = o1 * g.s[1] - g.pb[1] + k1 * g.d[1];
        T* d = dst + o;
        if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1]) {
          std::fill(d, d + run, T(0));
        } else {
          // Columns t whose input i2 = (o2 + t)·s + off lies in the row: [lo, hi);
          // zeros around, a plain (strided) copy inside, no per-element test.
          const T* xr = xc + (i0 * g.in[1] + i1) * g.in[2];
          const int64_t s2 = g.s[2], first = o2 * s2 + off;
          const int64_t lo = std::clamp<int64_t>(first >= 0 ? 0 : (-first + s2 - 1) / s2, 0, run);
          const int64_t last = g.in[2] - 1 - first;  // t·s2 <= last
          const int64_t hi = last < 0 ? lo : std::clamp<int64_t>(last / s2 + 1, lo, run);
          std::fill(d, d + lo, T(0));
          const T* src = xr + first;
          if (s2 == 1) std::copy(src + lo, src + hi, d + lo);
          else
            for (int64_t t = lo; t < hi; ++t) d[t] = src[t * s2];
          std::fill(d + hi, d + run, T(0));
        }
        o += run;
      }
    }
  });
}

// im2col scratch per block of output positions (per thread for float32) stays
// under this many bytes, so the convolution's workspace is bounded (a 7×7 stem on
// 224² would need 7 MB) and a float32 tile's B panel stays in L2.
constexpr int64_t kIm2colBlockBytes = 512 * 1024;
// float32 tiles: im2col (and accumulator) scratch per thread. Small enough that
// all threads' scratch together stays well under a network's activations (peak
// memory), large enough for GEMM tiles that keep OpenBLAS efficient.
constexpr int64_t kTileScratchBytes = 256 * 1024;

// The geometry both im2col paths work from: grouped channel counts, the GEMM's K,
// plane sizes, and whether the kernel is 1x1/stride 1/no padding (the input is
// then its own im2col matrix).
struct GroupedConv {
  Spatial g;
  int64_t nb, c, m, group, cg, mg, kdim, out_sz, in_sz;
  bool pointwise;
};

GroupedConv grouped_conv(const ConvAttrs& a, const Shape& xs, const Shape& ws) {
  GroupedConv v;
  v.g = as3d(conv_geometry(a, xs, ws));
  v.nb = xs[0], v.c = xs[1], v.m = ws[0];
  v.group = a.group;
  v.cg = v.c / v.group, v.mg = v.m / v.group;
  v.kdim = v.cg * v.g.k_size(), v.out_sz = v.g.out_size(), v.in_sz = v.g.in_size();
  v.pointwise = true;
  for (int i = 0; i < 3; ++i) {
    v.pointwise = v.pointwise && v.g.k[i] == 1 && v.g.s[i] == 1 && v.g.pb[i] == 0 && v.g.pe[i] == 0;
  }
  return v;
}

// What a float32 Conv node fuses into its output: the bias (input 2), a residual
// sum (input 3, attribute _sum) and an activation (node attributes).
struct FusedOutputs {
  const float* bias;
  const float* sum;
  ConvEpilogue e;
};

FusedOutputs fused_outputs(const ConvStep& s, const std::vector<TensorView>& in) {
  FusedOutputs f;
  f.bias = in.size() > 2 && in[2].data ? in[2].ptr<const float>() : nullptr;
  f.sum = s.epilogue.residual && in.size() > 3 ? in[3].ptr<const float>() : nullptr;
  f.e = ConvEpilogue::of(s.epilogue.has_activation(), s.epilogue.activation, s.epilogue.params);
  return f;
}

template <typename T>
void conv_im2col_typed(const std::string& gemm, const ConvStep& s, const std::vector<TensorView>& in,
                       TensorView& y) {
  const auto [g, nb, c, m, group, cg, mg, kdim, out_sz, in_sz, pointwise] =
      grouped_conv(s.attrs, in[0].shape, in[1].shape);
  const T* x = in[0].ptr<const T>();
  const T* w = in[1].ptr<const T>();
  T* py = y.ptr<T>();
  matmul::GemmProblem p;
  p.dtype = in[0].dtype;
  p.m = mg;
  p.n = out_sz;
  p.k = kdim;
  p.c_rs = out_sz;
  if (out_sz == 0 || mg == 0) return;
  if (kdim == 0) {
    std::memset(y.data, 0, y.nbytes());
  } else if (pointwise && group == 1) {
    // 1×1 convolution: the input planes already are the GEMM's B; one batched call.
    p.batch = nb;
    p.a = {w, kdim, 1, 0};
    p.b = {x, out_sz, 1, c * in_sz};
    p.c = py;
    p.c_bs = m * out_sz;
    run_gemm(gemm, p);
  } else if (pointwise) {
    for (int64_t b = 0; b < nb; ++b) {
      for (int64_t gi = 0; gi < group; ++gi) {
        p.a = {w + gi * mg * kdim, kdim, 1, 0};
        p.b = {x + (b * c + gi * cg) * in_sz, out_sz, 1, 0};
        p.c = py + (b * m + gi * mg) * out_sz;
        run_gemm(gemm, p);
      }
    }
  } else {
    // Output positions in blocks: im2col of one block, then its GEMM (C columns
    // are strided by the full output plane).
    const int64_t per_col = kdim * static_cast<int64_t>(sizeof(T));
    const int64_t block = std::min<int64_t>(out_sz, std::max<int64_t>(64, kIm2colBlockBytes / per_col));
    T* col = static_cast<T*>(thread_scratch(static_cast<std::size_t>(kdim * block) * sizeof(T), 1));
    for (int64_t b = 0; b < nb; ++b) {
      for (int64_t gi = 0; gi < group; ++gi) {
        const T* xg = x + (b * c + gi * cg) * in_sz;
        for (int64_t c0 = 0; c0 < out_sz; c0 += block) {
          const int64_t c1 = std::min(out_sz, c0 + block);
          im2col<T>(xg, cg, g, col, c0, c1);
          matmul::GemmProblem q = p;
          q.n = c1 - c0;
          q.a = {w + gi * mg * kdim, kdim, 1, 0};
          q.b = {col, c1 - c0, 1, 0};
          q.c = py + (b * m + gi * mg) * out_sz + c0;
          q.c_rs = out_sz;
          run_gemm(gemm, q);
        }
      }
    }
  }
  conv_epilogue<T>(s, in, y);
}

// The float32 im2col kernel. The GEMM of each (image, group) is cut into tiles that
// run whole on one thread of our pool: im2col of the tile's columns into that
// thread's scratch, a single-threaded GEMM (run_gemm nested in parallel_for runs
// inline), then bias/residual/activation on the tile while it is in cache. One
// pool owns the cores; no barrier between im2col, GEMM and epilogue.
//   column tiles  when the output plane is wide (each tile its own im2col block,
//                 bounded by kTileScratchBytes, or a slice of the input for 1×1);
//   row tiles     when it is narrow (late ResNet stages, 7×7 or 14×14 planes):
//                 blocks of output channels over the whole plane, the input
//                 channels walked in chunks (im2col of a chunk, GEMM, accumulate),
//                 so the weights are read once and the scratch stays bounded;
//   GEMV          for 1×1 convolutions of a 1×1 plane (squeeze-excitation).
void conv_im2col_f32(const std::string& gemm, const ConvStep& s, const std::vector<TensorView>& in,
                     TensorView& y) {
  const auto [g, nb, c, m, group, cg, mg, kdim, out_sz, in_sz, pointwise] =
      grouped_conv(s.attrs, in[0].shape, in[1].shape);
  const float* x = in[0].ptr<const float>();
  const float* w = in[1].ptr<const float>();
  float* py = y.ptr<float>();
  const auto [bias, sum, e] = fused_outputs(s, in);
  if (out_sz == 0 || mg == 0) return;
  if (kdim == 0) {
    std::memset(y.data, 0, y.nbytes());
    for (int64_t b = 0; b < nb; ++b)
      conv_epilogue_rows(e, py + b * m * out_sz, m, out_sz, out_sz, bias,
                         sum ? sum + b * m * out_sz : nullptr);
    return;
  }
  const int64_t gemms = nb * group;
  // One GEMM tile: rows [r0, r1) of output channels of group gi in image b, over
  // columns [c0, c1) whose B operand (kdim rows, row stride ldb) starts at bm.
  auto tile = [&](int64_t b, int64_t gi, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                  const float* bm, int64_t ldb) {
    const int64_t row = b * m + gi * mg + r0;
    matmul::GemmProblem q;
    q.dtype = DType::kFloat32;
    q.m = r1 - r0;
    q.n = c1 - c0;
    q.k = kdim;
    q.a = {w + (gi * mg + r0) * kdim, kdim, 1, 0};
    q.b = {bm, ldb, 1, 0};
    q.c = py + row * out_sz + c0;
    q.c_rs = out_sz;
    run_gemm(gemm, q);
    conv_epilogue_rows(e, py + row * out_sz + c0, r1 - r0, c1 - c0, out_sz,
                       bias ? bias + gi * mg + r0 : nullptr, sum ? sum + row * out_sz + c0 : nullptr);
  };
  const int64_t threads = parallel_threads();
  if (pointwise && out_sz == 1 && group == 1) {
    parallel_for(nb * ((m + 15) / 16), nb * m * kdim, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = t / ((m + 15) / 16), r0 = t % ((m + 15) / 16) * 16, r1 = std::min(m, r0 + 16);
        conv_gemv(e, w + r0 * kdim, r1 - r0, kdim, x + b * c, bias ? bias + r0 : nullptr,
                  sum ? sum + b * m + r0 : nullptr, py + b * m + r0);
      }
    });
    return;
  }
  // Column tiles: at most kTileScratchBytes of im2col per thread, or as much C for
  // a 1×1 conv; enough tiles for every thread twice over.
  const int64_t want = threads > 1 ? (2 * threads + gemms - 1) / gemms : 1;
  const int64_t cap = std::max<int64_t>(16, kTileScratchBytes / 4 / (pointwise ? mg : kdim));
  const int64_t cb = std::min({cap, out_sz, (out_sz + want - 1) / want});
  const int64_t ncb = (out_sz + cb - 1) / cb;
  if (cb < 48 && ncb > 1 && mg >= 16) {
    // Narrow plane (or deep kernel): tiles this thin would re-read all weights per
    // tile. Row tiles instead, each over the whole plane, walking the input
    // channels in chunks whose im2col fits the scratch and accumulating.
    const int64_t nrb = std::min((mg + 15) / 16, want);
    const int64_t rb = (mg + nrb - 1) / nrb;
    const int64_t kp = g.k_size();
    const int64_t tmp_floats = rb * out_sz;
    const int64_t col_budget = std::max<int64_t>(kp * out_sz, kTileScratchBytes / 4 - tmp_floats);
    int64_t cc = pointwise ? cg : std::max<int64_t>(1, col_budget / (kp * out_sz));
    const int64_t chunks = (cg + cc - 1) / cc;
    cc = (cg + chunks - 1) / chunks;
    parallel_for(gemms * nrb, gemms * mg * out_sz * kdim, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t bg = t / nrb, r0 = t % nrb * rb, r1 = std::min(mg, r0 + rb);
        const int64_t b = bg / group, gi = bg % group;
        if (r0 >= r1) continue;
        const float* xg = x + (b * c + gi * cg) * in_sz;
        const int64_t row = b * m + gi * mg + r0;
        float* yc = py + row * out_sz;
        float* col = pointwise ? nullptr : static_cast<float*>(thread_scratch(static_cast<std::size_t>(kp * cc * out_sz) * 4, 1));
        float* tmp = chunks > 1 ? static_cast<float*>(thread_scratch(static_cast<std::size_t>(tmp_floats) * 4, 0)) : nullptr;
        for (int64_t ch = 0; ch < chunks; ++ch) {
          const int64_t c0 = ch * cc, c1 = std::min(cg, c0 + cc);
          if (!pointwise) im2col<float>(xg + c0 * in_sz, c1 - c0, g, col, 0, out_sz);
          matmul::GemmProblem q;
          q.dtype = DType::kFloat32;
          q.m = r1 - r0;
          q.n = out_sz;
          q.k = (c1 - c0) * kp;
          q.a = {w + (gi * mg + r0) * kdim + c0 * kp, kdim, 1, 0};
          q.b = {pointwise ? xg + c0 * in_sz : col, out_sz, 1, 0};
          q.c = ch == 0 ? yc : tmp;
          q.c_rs = out_sz;
          run_gemm(gemm, q);
          if (ch > 0)
            for (int64_t i = 0; i < (r1 - r0) * out_sz; ++i) yc[i] += tmp[i];
        }
        conv_epilogue_rows(e, yc, r1 - r0, out_sz, out_sz, bias ? bias + gi * mg + r0 : nullptr,
                           sum ? sum + row * out_sz : nullptr);
      }
    });
    return;
  }
  parallel_for(gemms * ncb, gemms * mg * out_sz * kdim, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bg = t / ncb, c0 = t % ncb * cb, c1 = std::min(out_sz, c0 + cb);
      const int64_t b = bg / group, gi = bg % group;
      const float* xg = x + (b * c + gi * cg) * in_sz;
      if (pointwise) {
        tile(b, gi, 0, mg, c0, c1, xg + c0, out_sz);
      } else {
        float* col = static_cast<float*>(thread_scratch(static_cast<std::size_t>(kdim * (c1 - c0)) * 4, 1));
        im2col<float>(xg, cg, g, col, c0, c1);
        tile(b, gi, 0, mg, c0, c1, col, c1 - c0);
      }
    }
  });
}

// float32 depthwise through the AVX2 plane kernel (conv_kernels.h); false when it
// cannot run here (the portable loops below take over).
bool conv_depthwise_f32(const ConvStep& s, const std::vector<TensorView>& in, TensorView& y) {
  const Shape& xs = in[0].shape;
  const Shape& ws = in[1].shape;
  const Spatial sp = conv_geometry(s.attrs, xs, ws);
  const int64_t nb = xs[0], c = xs[1], m = ws[0], mult = m / c;
  const DwGeom g{sp.in[0], sp.in[1], sp.out[0], sp.out[1], sp.k[0], sp.k[1],
                 sp.s[0],  sp.s[1],  sp.d[0],   sp.d[1],   sp.pb[0], sp.pb[1]};
  if (!depthwise_plane_supported(g)) return false;
  const float* x = in[0].ptr<const float>();
  const float* w = in[1].ptr<const float>();
  float* py = y.ptr<float>();
  const auto [bias, sum, e] = fused_outputs(s, in);
  const int64_t plane_in = g.h * g.w, plane_out = g.oh * g.ow;
  parallel_for(nb * m, y.numel() * g.kh * g.kw, [&](int64_t q0, int64_t q1) {
    float* buf = static_cast<float*>(thread_scratch(static_cast<std::size_t>(g.scratch_floats()) * 4, 1));
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t b = q / m, oc = q % m;
      depthwise_plane(g, x + (b * c + oc / mult) * plane_in, w + oc * g.kh * g.kw,
                      bias ? bias[oc] : 0.f, sum ? sum + q * plane_out : nullptr, e,
                      py + q * plane_out, buf);
    }
  });
  return true;
}

template <typename T>
void conv_depthwise_typed(const ConvStep& s, const std::vector<TensorView>& in, TensorView& y) {
  const Shape& xs = in[0].shape;
  const Shape& ws = in[1].shape;
  const Spatial g = conv_geometry(s.attrs, xs, ws);
  const int64_t nb = xs[0], c = xs[1], m = ws[0], mult = m / c;
  const int64_t H = g.in[0], W = g.in[1], OH = g.out[0], OW = g.out[1];
  const int64_t KH = g.k[0], KW = g.k[1], SH = g.s[0], SW = g.s[1], DH = g.d[0], DW = g.d[1];
  const int64_t PH = g.pb[0], PW = g.pb[1];
  const T* x = in[0].ptr<const T>();
  const T* w = in[1].ptr<const T>();
  T* py = y.ptr<T>();
  auto lo_of = [](int64_t pad, int64_t koff, int64_t s) {  // first o with o*s - pad + koff >= 0
    int64_t v = pad - koff;
    return v <= 0 ? 0 : (v + s - 1) / s;
  };
  auto hi_of = [](int64_t pad, int64_t koff, int64_t s, int64_t in, int64_t out) {
    int64_t v = in - 1 + pad - koff;  // last o with o*s - pad + koff <= in - 1
    return v < 0 ? -1 : std::min(out - 1, v / s);
  };
parallel_for(nb * m, y.numel() * KH * KW, [&](int64_t q_begin, int64_t q_end) {
  for (int64_t q = q_begin; q < q_end; ++q) {
      const int64_t b = q / m, oc = q % m, ic = oc / mult;
      const T* xp = x + (b * c + ic) * H * W;
      const T* wp = w + oc * KH * KW;
      T* yp = py + q * OH * OW;
      std::fill(yp, yp + OH * OW, T(0));
      for (int64_t kh = 0; kh < KH; ++kh) {
        const int64_t oh0 = lo_of(PH, kh * DH, SH), oh1 = hi_of(PH, kh * DH, SH, H, OH);
        for (int64_t kw = 0; kw < KW; ++kw) {
          const int64_t ow0 = lo_of(PW, kw * DW, SW), ow1 = hi_of(PW, kw * DW, SW, W, OW);
          const T wv = wp[kh * KW + kw];
          for (int64_t oh = oh0; oh <= oh1; ++oh) {
            const T* xr = xp + (oh * SH - PH + kh * DH) * W + kw * DW - PW;
            T* yr = yp + oh * OW;
            if (SW == 1) {
  #pragma omp simd
              for (int64_t ow = ow0; ow <= ow1; ++ow) yr[ow] += wv * xr[ow];
            } else {
              for (int64_t ow = ow0; ow <= ow1; ++ow) yr[ow] += wv * xr[ow * SW];
            }
          }
        }
      }
  }
});
  conv_epilogue<T>(s, in, y);
}

Support depthwise_supports(const Node& n, const std::vector<Meta>& in) {
  if (in.size() < 2 || !in[0].shape || !in[1].shape)
    return Support::no(reason::kShapeUnsupported, "needs known input and weight shapes");
  const Shape& x = *in[0].shape;
  const Shape& w = *in[1].shape;
  const int64_t group = ConvAttrs::from_node(n).group;
  if (x.size() != 4) return Support::no(reason::kShapeUnsupported, "only 2-D convolutions");
  if (group != x[1] || group == 1 || w[0] % x[1] != 0 || w[1] != 1)
    return Support::no(reason::kShapeUnsupported,
                       "not depthwise (group " + std::to_string(group) + ", " +
                           std::to_string(x[1]) + " input channels)");
  return Support::yes();
}

// The geometry of a 2-D Conv for conv_direct (one group).
DirectConvGeom direct_geometry(const GroupedConv& v) {
  const Spatial& g = v.g;  // as3d: dims 1 and 2 are H and W
  return {v.cg, g.in[1], g.in[2], v.mg, g.out[1], g.out[2], g.k[1], g.k[2],
          g.s[1],  g.s[2],  g.d[1],  g.d[2],  g.pb[1],  g.pb[2]};
}

Support direct_supports(const Node& n, const std::vector<Meta>& in) {
  if (in.size() < 2 || !in[0].shape || !in[1].shape)
    return Support::no(reason::kShapeUnsupported, "needs known input and weight shapes");
  if (in[0].shape->size() != 4) return Support::no(reason::kShapeUnsupported, "only 2-D convolutions");
  const GroupedConv v = grouped_conv(ConvAttrs::from_node(n), *in[0].shape, *in[1].shape);
  const DirectConvGeom g = direct_geometry(v);
  if (!conv_direct_supported(g))
    return Support::no(reason::kCapabilityTooLow,
                       "needs an AVX2/FMA CPU and fewer than 2^31 input elements per group");
  if (g.oh * g.ow <= 1)
    return Support::no(reason::kShapeUnsupported,
                       "a 1×1 output plane is one dot product per channel (cpu_im2col's GEMV)");
  return Support::yes();
}

// cpu_direct: every (image, group) through conv_direct, parallel inside.
void conv_direct_run(const ConvStep& s, const Node& n, const std::vector<TensorView>& in,
                     std::vector<TensorView>& out) {
  XRT_CHECK(in[0].dtype == DType::kFloat32, UnsupportedOperationError, n.where(),
            ": cpu_direct runs float32 Conv, got ", dtype_name(in[0].dtype));
  const GroupedConv v = grouped_conv(s.attrs, in[0].shape, in[1].shape);
  const DirectConvGeom g = direct_geometry(v);
  const auto [bias, sum, e] = fused_outputs(s, in);
  const float* x = in[0].ptr<const float>();
  const float* w = in[1].ptr<const float>();
  float* y = out[0].ptr<float>();
  for (int64_t b = 0; b < v.nb; ++b)
    for (int64_t gi = 0; gi < v.group; ++gi) {
      const int64_t row = b * v.m + gi * v.mg;
      conv_direct(g, x + (b * v.c + gi * v.cg) * v.in_sz, w + gi * v.mg * v.kdim,
                  bias ? bias + gi * v.mg : nullptr, sum ? sum + row * v.out_sz : nullptr, e,
                  y + row * v.out_sz);
    }
}

void conv_depthwise_run(const ConvStep& s, const Node& n, const std::vector<TensorView>& in,
                        std::vector<TensorView>& out) {
  if (in[0].dtype == DType::kFloat64) {
    conv_depthwise_typed<double>(s, in, out[0]);
  } else {
    XRT_CHECK(in[0].dtype == DType::kFloat32, UnsupportedOperationError, n.where(),
              ": Conv on the CPU takes float32 or float64, got ", dtype_name(in[0].dtype));
    if (!conv_depthwise_f32(s, in, out[0])) conv_depthwise_typed<float>(s, in, out[0]);
  }
}

void conv_im2col_run(const std::string& gemm, const ConvStep& s, const Node& n,
                     const std::vector<TensorView>& in, std::vector<TensorView>& out) {
  if (in[0].dtype == DType::kFloat64) {
    conv_im2col_typed<double>(gemm, s, in, out[0]);
  } else {
    XRT_CHECK(in[0].dtype == DType::kFloat32, UnsupportedOperationError, n.where(),
              ": Conv on the CPU takes float32 or float64, got ", dtype_name(in[0].dtype));
    conv_im2col_f32(gemm, s, in, out[0]);
  }
}

// cpu_im2col bound to a plan step, with the GEMM sub-kernel it runs its tiles with.
class Im2colPrepared final : public PreparedKernel {
 public:
  Im2colPrepared(Node node, std::shared_ptr<const CpuGemmPrepared> gemm, std::string gemm_name)
      : node_(std::move(node)),
        step_(ConvStep::from_node(node_)),
        gemm_(std::move(gemm)),
        gemm_name_(std::move(gemm_name)) {}
  void run(const KernelArgs& args) const override {
    const std::vector<TensorView> in = views_of(args.inputs);
    std::vector<TensorView> out = views_of(args.outputs);
    conv_im2col_run(gemm_name_, step_, node_, in, out);
  }

 private:
  Node node_;
  ConvStep step_;
  std::shared_ptr<const CpuGemmPrepared> gemm_;  // the sub-kernel (null: no prepare_sub)
  std::string gemm_name_;
};

// The convolution's GEMM as its own matmul case (one group's weights [M/group, K]
// times one image's columns [K, spatial]), dispatched through pc.prepare_sub under
// the plan's policies and recorded as node "<conv>/gemm".
PreparedKernelPtr im2col_prepare(const OpDef& def, const PrepareContext& pc) {
  Node n = prepared_node(def.op_type, pc);
  if (!pc.prepare_sub || pc.ctx == nullptr || pc.ctx->inputs.size() < 2 ||
      pc.ctx->outputs.empty()) {
    // Outside a plan compile (no dispatcher to ask): the best available GEMM.
    std::string name = gemm_kernel_names().front();
    return std::make_shared<Im2colPrepared>(std::move(n), nullptr, std::move(name));
  }
  const OpContext& ctx = *pc.ctx;
  OpContext mc;
  mc.op = "matmul";
  mc.node = ctx.node + "/gemm";
  mc.device = ctx.device;
  mc.capability = ctx.capability;
  mc.workspace_limit_bytes = ctx.workspace_limit_bytes;
  mc.allow_tf32 = ctx.allow_tf32;
  mc.deterministic = ctx.deterministic;
  mc.strict_no_fallback = ctx.strict_no_fallback;
  mc.strict_pinned_only = ctx.strict_pinned_only;
  const TensorSpec& w = ctx.inputs[1];
  const TensorSpec& y = ctx.outputs[0];
  const int64_t group = std::max<int64_t>(1, ConvAttrs::from_node(n).group);
  int64_t kk = 1, sp = 1;
  for (std::size_t i = 1; i < w.shape.size(); ++i) kk *= w.shape[i];
  for (std::size_t i = 2; i < y.shape.size(); ++i) sp *= y.shape[i];
  const int64_t mg = w.shape.empty() ? 0 : w.shape[0] / group;
  mc.inputs = {TensorSpec{w.dtype, {mg, kk}, {}}, TensorSpec{w.dtype, {kk, sp}, {}}};
  mc.outputs = {TensorSpec{w.dtype, {mg, sp}, {}}};
  Node sub;
  sub.name = mc.node;
  sub.op_type = "Conv";  // the op the GEMM serves: the matmul kernels prepare a plain GEMM
  PreparedKernelPtr p = pc.prepare_sub(mc, sub);
  auto gemm = std::dynamic_pointer_cast<const CpuGemmPrepared>(p);
  XRT_CHECK(gemm != nullptr, UnsupportedOperationError, n.where(),
            ": the matmul kernel chosen for this convolution's GEMM (", mc.node,
            ") cannot run inside a CPU convolution; CPU GEMM kernels: onednn, cpu_blas, "
            "cpu_blocked (pin one of them for op 'matmul', or pin conv to cpu_direct)");
  std::string name = gemm->gemm();
  return std::make_shared<Im2colPrepared>(std::move(n), std::move(gemm), std::move(name));
}

}  // namespace

void register_conv_ops(std::vector<OpDef>& defs) {
  OpDef d;
  d.op_type = "Conv";
  d.kernel = "cpu_depthwise";
  d.dtypes = {DType::kFloat32, DType::kFloat64};
  d.priority = 20;
  d.description = "direct 2-D depthwise convolution (group == channels)";
  set_parsed_body<ConvStep>(d, conv_depthwise_run);
  d.supports = depthwise_supports;
  defs.push_back(d);
  OpDef r;
  r.op_type = "Conv";
  r.kernel = "cpu_direct";
  r.dtypes = {DType::kFloat32};
  r.priority = 15;
  r.description = "direct 2-D convolution without im2col (AVX2/FMA register tiles on the padded input)";
  set_parsed_body<ConvStep>(r, conv_direct_run);
  r.supports = direct_supports;
  defs.push_back(r);
  OpDef i;
  i.op_type = "Conv";
  i.kernel = "cpu_im2col";
  i.dtypes = {DType::kFloat32, DType::kFloat64};
  i.priority = 10;
  i.description = "im2col + GEMM through the chosen matmul kernel (any Conv, 1-3 spatial dims)";
  i.run = [](const Node& n, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
    conv_im2col_run(gemm_kernel_names().front(), ConvStep::from_node(n), n, in, out);
  };
  i.prepare = im2col_prepare;
  defs.push_back(i);
}

}  // namespace xpuruntime::cpu
