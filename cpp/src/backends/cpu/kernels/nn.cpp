// Normalization and softmax: Softmax, LogSoftmax, LayerNormalization, RMSNormalization,
// BatchNormalization (inference form).
// Branch-free float code (clamps, selects) vectorizes only when comparisons may be
// speculated; results are identical, only FP exception flags could differ. Before
// every include so inline helpers share these options and stay inlinable.
#pragma GCC optimize("no-trapping-math")
#include <cmath>
#include <vector>

#include "backends/cpu/kernels/cpu_op.h"
#include "backends/cpu/kernels/fastmath.h"
#include "backends/cpu/kernels/parallel.h"
#include "backends/cpu/kernels/isa_clones.h"
#include "xpuruntime/ops/nn.h"

namespace xpuruntime::cpu {
void store_stat(TensorView& t, int64_t r, double v);
namespace {

// One contiguous float32 row (the common case: softmax over the last axis), in
// place in y: max, then exp and sum in one pass, then the scale. Each loop has a
// single job and no conditional store, so all three vectorize at the clone's width
// (a 1500-wide attention row is 3 passes over 6 KB of L1).
[[gnu::flatten]] XRT_ISA_CLONES void softmax_row(const float* x, float* y, int64_t len, bool log) {
  float m = -INFINITY;
  for (int64_t i = 0; i < len; ++i) m = x[i] > m ? x[i] : m;
  if (std::isinf(m) && m < 0) m = 0;  // all -inf row: exp gives 0s, sum 0 -> NaN like ORT
  float s = 0;
  if (log) {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < len; ++i) s += fast_exp(x[i] - m);
    const float ls = std::log(s);
    for (int64_t i = 0; i < len; ++i) y[i] = x[i] - m - ls;
    return;
  }
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < len; ++i) {
    const float e = fast_exp(x[i] - m);
    y[i] = e;
    s += e;
  }
  const float inv = 1.0f / s;
  for (int64_t i = 0; i < len; ++i) y[i] *= inv;
}

// Softmax over rows of `len` elements with stride `inner` (row r starts at
// (r / inner) * len * inner + r % inner).
template <typename T>
void softmax_typed(const T* x, T* y, int64_t outer, int64_t len, int64_t inner, bool log) {
  using N = Num<T>;
  const int64_t rows = outer * inner;
  parallel_for(rows, rows * len, [&](int64_t r_begin, int64_t r_end) XRT_ISA_LAMBDA {
    std::vector<float> buf(static_cast<std::size_t>(len));
    for (int64_t r = r_begin; r < r_end; ++r) {
      const int64_t base = (r / inner) * len * inner + r % inner;
      const T* xr = x + base;
      T* yr = y + base;
      if constexpr (std::is_same_v<T, double>) {
        double m = -INFINITY;
        for (int64_t i = 0; i < len; ++i) m = std::max(m, xr[i * inner]);
        double s = 0;
        for (int64_t i = 0; i < len; ++i) s += std::exp(xr[i * inner] - m);
        for (int64_t i = 0; i < len; ++i)
          yr[i * inner] = log ? xr[i * inner] - m - std::log(s) : std::exp(xr[i * inner] - m) / s;
      } else if constexpr (std::is_same_v<T, float>) {
        if (inner == 1) {
          softmax_row(xr, yr, len, log);
          continue;
        }
      }
      if constexpr (!std::is_same_v<T, double>) {
        float m = -INFINITY;
        for (int64_t i = 0; i < len; ++i) {
          buf[i] = N::load(xr[i * inner]);
          m = buf[i] > m ? buf[i] : m;
        }
        if (std::isinf(m) && m < 0) m = 0;  // all -inf row: exp gives 0s, sum 0 -> NaN like ORT
        float s = 0;
        float* b = buf.data();
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < len; ++i) {
          float e = fast_exp(b[i] - m);
          s += e;
          if (!log) b[i] = e;
        }
        if (log) {
          float ls = std::log(s);
          for (int64_t i = 0; i < len; ++i) yr[i * inner] = N::store(b[i] - m - ls);
        } else {
          float inv = 1.0f / s;
          for (int64_t i = 0; i < len; ++i) yr[i * inner] = N::store(b[i] * inv);
        }
      }
    }
  });
}

OpDef softmax_def(const std::string& type) {
  OpDef d;
  d.op_type = type;
  d.kernel = "cpu";
  const bool log = type == "LogSoftmax";
  set_parsed_body<ops::SoftmaxAttrs>(d, [log](const ops::SoftmaxAttrs& a, const Node& n,
                                              const std::vector<TensorView>& in,
                                              std::vector<TensorView>& out) {
    const Shape& s = in[0].shape;
    const int64_t rank = in[0].rank();
    if (in[0].numel() == 0) return;
    int64_t outer = 1, inner = 1, len = 1;
    if (rank > 0) {
      const int64_t axis = norm_axis(n, a.axis, rank);
      for (int64_t i = 0; i < axis; ++i) outer *= s[i];
      for (int64_t i = axis + 1; i < rank; ++i) inner *= s[i];
      len = s[axis];
    }
    visit_dtype(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (kIsFloat<T>) {
        softmax_typed<T>(in[0].ptr<const T>(), out[0].ptr<T>(), outer, len, inner, log);
      }
    });
  });
  return d;
}

template <typename T>
void layernorm_typed(const TensorView& x, const TensorView& scale, const TensorView* bias,
                     TensorView& y, TensorView* mean_out, TensorView* inv_out, int64_t rows,
                     int64_t len, double eps) {
  using N = Num<T>;
  const T* px = x.ptr<const T>();
  const T* ps = scale.ptr<const T>();
  const T* pb = bias ? bias->ptr<const T>() : nullptr;
  const int64_t sn = scale.numel();
  const int64_t bn = bias ? bias->numel() : 0;
  T* py = y.ptr<T>();
parallel_for(rows, rows * len, [&](int64_t r_begin, int64_t r_end) XRT_ISA_LAMBDA {
  for (int64_t r = r_begin; r < r_end; ++r) {
      const T* xr = px + r * len;
      T* yr = py + r * len;
      double mean = 0;
      if constexpr (std::is_same_v<T, float>) {
        float s = 0;
  #pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < len; ++i) s += xr[i];
        mean = static_cast<double>(s) / static_cast<double>(len);
      } else {
        for (int64_t i = 0; i < len; ++i) mean += N::load(xr[i]);
        mean /= static_cast<double>(len);
      }
      double var = 0;
      if constexpr (std::is_same_v<T, float>) {
        float v = 0, mf = static_cast<float>(mean);
  #pragma omp simd reduction(+ : v)
        for (int64_t i = 0; i < len; ++i) v += (xr[i] - mf) * (xr[i] - mf);
        var = static_cast<double>(v) / static_cast<double>(len);
      } else {
        for (int64_t i = 0; i < len; ++i) {
          double dv = N::load(xr[i]) - mean;
          var += dv * dv;
        }
        var /= static_cast<double>(len);
      }
      const double inv = 1.0 / std::sqrt(var + eps);
      using C = typename N::C;
      const C m = static_cast<C>(mean), iv = static_cast<C>(inv);
      if constexpr (std::is_same_v<T, float>) {
        if (sn == len && (pb == nullptr || bn == len)) {
          // The common case (scale and bias over the whole row) as loops the compiler
          // vectorizes: no per-element modulo or bias test (2.3x ONNX Runtime's time
          // on Swin's and ConvNeXt's LayerNorms before).
          if (pb != nullptr) {
  #pragma omp simd
            for (int64_t i = 0; i < len; ++i) yr[i] = (xr[i] - m) * iv * ps[i] + pb[i];
          } else {
  #pragma omp simd
            for (int64_t i = 0; i < len; ++i) yr[i] = (xr[i] - m) * iv * ps[i];
          }
          if (mean_out) store_stat(*mean_out, r, mean);
          if (inv_out) store_stat(*inv_out, r, inv);
          continue;
        }
      }
      for (int64_t i = 0; i < len; ++i) {
        C v = (N::load(xr[i]) - m) * iv * N::load(ps[sn == len ? i : i % sn]);
        if (pb) v += N::load(pb[bn == len ? i : i % bn]);
        yr[i] = N::store(v);
      }
      if (mean_out) store_stat(*mean_out, r, mean);
      if (inv_out) store_stat(*inv_out, r, inv);
  }
});
}

}  // namespace

// Mean / InvStdDev outputs are float32 by default (stash_type 1) or the input type.
void store_stat(TensorView& t, int64_t r, double v) {
  visit_dtype(t.dtype, [&](auto tag) {
    using T = decltype(tag);
    t.ptr<T>()[r] = Num<T>::store(static_cast<typename Num<T>::C>(v));
  });
}

namespace {

OpDef layernorm_def() {
  OpDef d;
  d.op_type = "LayerNormalization";
  d.kernel = "cpu";
  set_parsed_body<ops::LayerNormAttrs>(d, [](const ops::LayerNormAttrs& a, const Node& n,
                                             const std::vector<TensorView>& in,
                                             std::vector<TensorView>& out) {
    const Shape& s = in[0].shape;
    const int64_t rank = in[0].rank();
    const int64_t axis = norm_axis(n, a.axis, rank);
    int64_t rows = 1, len = 1;
    for (int64_t i = 0; i < axis; ++i) rows *= s[i];
    for (int64_t i = axis; i < rank; ++i) len *= s[i];
    const TensorView* bias = in.size() > 2 && in[2].data ? &in[2] : nullptr;
    TensorView* mo = out.size() > 1 && out[1].data ? &out[1] : nullptr;
    TensorView* io = out.size() > 2 && out[2].data ? &out[2] : nullptr;
    if (len == 0 || rows == 0) return;
    visit_dtype(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (kIsFloat<T>) {
        layernorm_typed<T>(in[0], in[1], bias, out[0], mo, io, rows, len, a.epsilon);
      }
    });
  });
  return d;
}

// RMSNormalization: y = x / sqrt(mean(x^2) + eps) * scale per row, the mean of
// squares accumulated in double (float rows: a float sum the compiler vectorizes).
template <typename T>
void rmsnorm_typed(const TensorView& x, const TensorView& scale, TensorView& y, int64_t rows,
                   int64_t len, double eps) {
  using N = Num<T>;
  using C = typename N::C;
  const T* px = x.ptr<const T>();
  const T* ps = scale.ptr<const T>();
  const int64_t sn = scale.numel();
  T* py = y.ptr<T>();
  parallel_for(rows, rows * len, [&](int64_t r_begin, int64_t r_end) XRT_ISA_LAMBDA {
    for (int64_t r = r_begin; r < r_end; ++r) {
      const T* xr = px + r * len;
      T* yr = py + r * len;
      double ms = 0;
      if constexpr (std::is_same_v<T, float>) {
        float s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < len; ++i) s += xr[i] * xr[i];
        ms = static_cast<double>(s) / static_cast<double>(len);
      } else {
        for (int64_t i = 0; i < len; ++i) {
          const double v = N::load(xr[i]);
          ms += v * v;
        }
        ms /= static_cast<double>(len);
      }
      const C inv = static_cast<C>(1.0 / std::sqrt(ms + eps));
      if constexpr (std::is_same_v<T, float>) {
        if (sn == len) {
#pragma omp simd
          for (int64_t i = 0; i < len; ++i) yr[i] = xr[i] * inv * ps[i];
          continue;
        }
      }
      for (int64_t i = 0; i < len; ++i)
        yr[i] = N::store(N::load(xr[i]) * inv * N::load(ps[sn == len ? i : i % sn]));
    }
  });
}

OpDef rmsnorm_def() {
  OpDef d;
  d.op_type = "RMSNormalization";
  d.kernel = "cpu";
  set_parsed_body<ops::LayerNormAttrs>(d, [](const ops::LayerNormAttrs& a, const Node& n,
                                             const std::vector<TensorView>& in,
                                             std::vector<TensorView>& out) {
    const Shape& s = in[0].shape;
    const int64_t rank = in[0].rank();
    const int64_t axis = norm_axis(n, a.axis, rank);
    int64_t rows = 1, len = 1;
    for (int64_t i = 0; i < axis; ++i) rows *= s[i];
    for (int64_t i = axis; i < rank; ++i) len *= s[i];
    if (len == 0 || rows == 0) return;
    visit_dtype(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (kIsFloat<T>) rmsnorm_typed<T>(in[0], in[1], out[0], rows, len, a.epsilon);
    });
  });
  return d;
}

OpDef batchnorm_def() {
  OpDef d;
  d.op_type = "BatchNormalization";
  d.kernel = "cpu";
  set_parsed_body<ops::BatchNormAttrs>(d, [](const ops::BatchNormAttrs& attrs, const Node&,
                                             const std::vector<TensorView>& in,
                                             std::vector<TensorView>& out) {
    const Shape& s = in[0].shape;
    const int64_t nb = s[0], c = s[1];
    const int64_t inner = in[0].numel() / std::max<int64_t>(1, nb * c);
    const double eps = attrs.epsilon;
    std::vector<double> a(c), b(c);
    auto val = [](const TensorView& t, int64_t i) {
      return HostTensor::wrap(t.dtype, t.shape, t.data, nullptr).float_at(i);
    };
    for (int64_t k = 0; k < c; ++k) {
      a[k] = val(in[1], k) / std::sqrt(val(in[4], k) + eps);
      b[k] = val(in[2], k) - val(in[3], k) * a[k];
    }
    visit_dtype(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      using N = Num<T>;
      using C = typename N::C;
      const T* x = in[0].ptr<const T>();
      T* y = out[0].ptr<T>();
parallel_for(nb * c, in[0].numel(), [&](int64_t p_begin, int64_t p_end) XRT_ISA_LAMBDA {
  for (int64_t p = p_begin; p < p_end; ++p) {
          const C ak = static_cast<C>(a[p % c]), bk = static_cast<C>(b[p % c]);
          for (int64_t i = 0; i < inner; ++i)
            y[p * inner + i] = N::store(static_cast<C>(N::load(x[p * inner + i]) * ak + bk));
  }
});
    });
  });
  return d;
}

}  // namespace

void register_nn_pool_ops(std::vector<OpDef>& defs);  // pool.cpp

void register_nn_ops(std::vector<OpDef>& defs) {
  register_nn_pool_ops(defs);
  defs.push_back(softmax_def("Softmax"));
  defs.push_back(softmax_def("LogSoftmax"));
  defs.push_back(layernorm_def());
  defs.push_back(rmsnorm_def());
  defs.push_back(batchnorm_def());
}

}  // namespace xpuruntime::cpu
