// Pooling: MaxPool (with optional Indices), AveragePool, GlobalAveragePool,
// GlobalMaxPool over 1-3 spatial dimensions (computed as 3-D with unit leading dims).
// Branch-free float code (clamps, selects) vectorizes only when comparisons may be
// speculated; results are identical, only FP exception flags could differ. Before
// every include so inline helpers share these options and stay inlinable.
#pragma GCC optimize("no-trapping-math")
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/cpu/kernels/spatial.h"
#include "backends/cpu/kernels/parallel.h"
#include "backends/cpu/kernels/isa_clones.h"

namespace xpuruntime::cpu {
namespace {

// Pads a geometry to exactly 3 spatial dims (leading unit dims).
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

// One step of a running maximum that keeps NaN: a NaN value replaces the maximum,
// and a NaN maximum stays (v > NaN is false), as numpy's max and torch's max_pool.
template <typename C>
inline C nan_max_step(C best, C v) {
  return v > best || v != v ? v : best;
}

// Whether n values hold a NaN (one vectorized OR-reduction pass).
template <typename T>
bool any_nan(const T* x, int64_t n) {
  using N = Num<T>;
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto v = N::load(x[i]);
    bad |= static_cast<int>(v != v);
  }
  return bad != 0;
}

// 2-D max pooling without indices: per output row/column the valid kernel window
// is computed once, so the inner loops carry no bounds checks.
template <typename T>
void maxpool2d(const Spatial& g, const T* px, T* py, int64_t planes) {
  using N = Num<T>;
  using C = typename N::C;
  const int64_t H = g.in[1], W = g.in[2], OH = g.out[1], OW = g.out[2];
  const int64_t KH = g.k[1], KW = g.k[2], SH = g.s[1], SW = g.s[2], DH = g.d[1], DW = g.d[2];
  const int64_t PH = g.pb[1], PW = g.pb[2];
  std::vector<int64_t> kw0(OW), kw1(OW);
  for (int64_t ow = 0; ow < OW; ++ow) {
    const int64_t b = ow * SW - PW;
    kw0[ow] = b >= 0 ? 0 : (-b + DW - 1) / DW;
    kw1[ow] = std::min(KW, b + (KW - 1) * DW < W ? KW : (W - 1 - b) / DW + 1);
  }
  const C lowest = std::numeric_limits<C>::has_infinity ? -std::numeric_limits<C>::infinity()
                                                        : std::numeric_limits<C>::lowest();
parallel_for(planes, planes * OH * OW * KH * KW, [&](int64_t p_begin, int64_t p_end) XRT_ISA_LAMBDA {
  // Per output row: the column-wise max over the window's rows first (contiguous,
  // vectorizes), then the max over each window's columns of that row: KH + KW
  // comparisons per output instead of KH·KW. Max is exact, so the result is the same.
  std::vector<C> rowmax(static_cast<std::size_t>(W));
  // NaN-aware maxima keep the row loops from vectorizing (4x slower): they run only
  // for a plane that holds a NaN, found by one cheap pass first.
  auto plane = [&](const T* xp, T* yp, auto nan_aware) {
    auto step = [](C best, C v) {
      if constexpr (decltype(nan_aware)::value)
        return nan_max_step(best, v);
      else
        return v > best ? v : best;
    };
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t bh = oh * SH - PH;
      const int64_t kh0 = bh >= 0 ? 0 : (-bh + DH - 1) / DH;
      const int64_t kh1 = std::min(KH, bh + (KH - 1) * DH < H ? KH : (H - 1 - bh) / DH + 1);
      C* rm = rowmax.data();
      for (int64_t w = 0; w < W; ++w) rm[w] = lowest;
      for (int64_t kh = kh0; kh < kh1; ++kh) {
        const T* xr = xp + (bh + kh * DH) * W;
        for (int64_t w = 0; w < W; ++w) rm[w] = step(rm[w], N::load(xr[w]));
      }
      for (int64_t ow = 0; ow < OW; ++ow) {
        const C* r = rm + ow * SW - PW;
        C best = lowest;
        for (int64_t kw = kw0[ow]; kw < kw1[ow]; ++kw) best = step(best, r[kw * DW]);
        yp[oh * OW + ow] = N::store(best);
      }
    }
  };
  for (int64_t p = p_begin; p < p_end; ++p) {
    const T* xp = px + p * H * W;
    T* yp = py + p * OH * OW;
    if (any_nan(xp, H * W))
      plane(xp, yp, std::true_type{});
    else
      plane(xp, yp, std::false_type{});
  }
});
}

// The taps of a window along one dimension: valid ones [k0, k1) (inside the input) and
// how many lie inside input + pads (count_include_pad's count). A window starting past
// the input (ceil_mode) has none; the check comes first as C++ division truncates.
struct Taps {
  int64_t k0 = 0, k1 = 0, padded = 0;
};
Taps window_taps(int64_t o, int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe) {
  const int64_t b = o * s - pb;
  Taps t;
  t.k0 = b >= 0 ? 0 : (-b + d - 1) / d;
  t.k1 = b > in - 1 ? 0 : std::min(k, (in - 1 - b) / d + 1);
  t.k1 = std::max(t.k1, t.k0);
  const int64_t last = in + pe - 1 - b;
  t.padded = last < 0 ? 0 : std::min(k, last / d + 1);
  return t;
}

// 2-D average pooling, separable: per output row the sum over the window's valid rows
// (contiguous, vectorizes), then per output the sum over its valid columns of that row
// sum: KH + KW adds per output instead of KH·KW and no per-tap bounds checks. Outputs
// whose windows lie inside the row (the interior) are summed a tap at a time across the
// row, which vectorizes for stride 1. Both counts are separable too (valid positions,
// or positions inside input + pads), so the sum is scaled by the reciprocals of a
// per-row and a per-column count (a rounding or two from dividing by their product); a
// window without positions gives 0, as the generic loop. Sums run in the compute type
// (float for fp32/fp16/bf16) instead of the generic loop's double.
template <typename T>
void avgpool2d(const Spatial& g, bool include_pad, const T* px, T* py, int64_t planes) {
  using N = Num<T>;
  using C = typename N::C;
  const int64_t H = g.in[1], W = g.in[2], OH = g.out[1], OW = g.out[2];
  const int64_t KH = g.k[1], KW = g.k[2], SW = g.s[2], DW = g.d[2], PW = g.pb[2];
  std::vector<Taps> th(OH), tw(OW);
  for (int64_t oh = 0; oh < OH; ++oh)
    th[oh] = window_taps(oh, H, KH, g.s[1], g.d[1], g.pb[1], g.pe[1]);
  std::vector<C> inv_w(OW);  // 1 / per-column count (0 for a column without positions)
  int64_t lo = OW, hi = 0;   // the interior [lo, hi): every column tap valid
  for (int64_t ow = 0; ow < OW; ++ow) {
    tw[ow] = window_taps(ow, W, KW, SW, DW, PW, g.pe[2]);
    const int64_t cnt = include_pad ? tw[ow].padded : tw[ow].k1 - tw[ow].k0;
    inv_w[ow] = cnt > 0 ? C(1) / static_cast<C>(cnt) : C(0);
    if (tw[ow].k0 == 0 && tw[ow].k1 == KW) {
      lo = std::min(lo, ow);
      hi = ow + 1;
    }
  }
  for (int64_t ow = lo; ow < hi; ++ow)  // the interior is contiguous; guard anyway
    if (tw[ow].k0 != 0 || tw[ow].k1 != KW) lo = hi;
  // PoolFormer's 3x3 stride-1 window: three adds and one multiply per output.
  const bool k3s1 = KW == 3 && SW == 1 && DW == 1;
  parallel_for(
      planes, planes * OH * OW * (KH + KW), [&](int64_t p_begin, int64_t p_end) XRT_ISA_LAMBDA {
        std::vector<C> rows(static_cast<std::size_t>(W)), acc(static_cast<std::size_t>(OW));
        std::vector<C> scale(static_cast<std::size_t>(OW));
        for (int64_t p = p_begin; p < p_end; ++p) {
          const T* xp = px + p * H * W;
          T* yp = py + p * OH * OW;
          for (int64_t oh = 0; oh < OH; ++oh) {
            const Taps& t = th[oh];
            const int64_t bh = oh * g.s[1] - g.pb[1];
            C* rs = rows.data();
            if (t.k1 > t.k0) {  // the first valid row, then the others added
              const T* x0 = xp + (bh + t.k0 * g.d[1]) * W;
              for (int64_t w = 0; w < W; ++w) rs[w] = N::load(x0[w]);
            } else {
              for (int64_t w = 0; w < W; ++w) rs[w] = C(0);
            }
            for (int64_t kh = t.k0 + 1; kh < t.k1; ++kh) {
              const T* xr = xp + (bh + kh * g.d[1]) * W;
              for (int64_t w = 0; w < W; ++w) rs[w] += N::load(xr[w]);
            }
            const int64_t cnt_h = include_pad ? t.padded : t.k1 - t.k0;
            const C inv_h = cnt_h > 0 ? C(1) / static_cast<C>(cnt_h) : C(0);
            C* sc = scale.data();
            for (int64_t ow = 0; ow < OW; ++ow) sc[ow] = inv_h * inv_w[ow];
            T* yr = yp + oh * OW;
            if (lo < hi) {
              const C* r = rs + (lo * SW - PW);  // inside the row for the interior
              const int64_t n = hi - lo;
              if (k3s1) {
                for (int64_t i = 0; i < n; ++i)
                  yr[lo + i] = N::store((r[i] + r[i + 1] + r[i + 2]) * sc[lo + i]);
              } else {
                C* a = acc.data();
                for (int64_t i = 0; i < n; ++i) a[i] = r[i * SW];
                for (int64_t kw = 1; kw < KW; ++kw) {
                  const C* rk = r + kw * DW;
                  if (SW == 1) {
                    for (int64_t i = 0; i < n; ++i) a[i] += rk[i];
                  } else {
                    for (int64_t i = 0; i < n; ++i) a[i] += rk[i * SW];
                  }
                }
                for (int64_t i = 0; i < n; ++i) yr[lo + i] = N::store(a[i] * sc[lo + i]);
              }
            }
            for (int64_t ow = 0; ow < OW; ++ow) {  // the edges, tap by tap
              if (ow == lo) ow = hi;
              if (ow >= OW) break;
              const int64_t b = ow * SW - PW;
              C sum = C(0);
              for (int64_t kw = tw[ow].k0; kw < tw[ow].k1; ++kw) sum += rs[b + kw * DW];
              yr[ow] = N::store(sum * sc[ow]);
            }
          }
        }
      });
}

template <typename T>
void pool_typed(const PoolAttrs& a, const TensorView& x, TensorView& y, TensorView* idx,
                bool is_max) {
  using N = Num<T>;
  using C = typename N::C;
  const Spatial g = as3d(pool_geometry(a, x.shape));
  const int64_t planes = x.shape[0] * x.shape[1];
  if (is_max && !idx && g.in[0] == 1 && g.k[0] == 1 && g.pb[0] == 0) {
    maxpool2d<T>(g, x.ptr<const T>(), y.ptr<T>(), planes);
    return;
  }
  if constexpr (kIsFloat<T>) {
    if (!is_max && g.in[0] == 1 && g.k[0] == 1 && g.pb[0] == 0 && g.out[0] == 1) {
      avgpool2d<T>(g, a.count_include_pad, x.ptr<const T>(), y.ptr<T>(), planes);
      return;
    }
  }
  const int64_t in_sz = g.in_size(), out_sz = g.out_size();
  const bool include_pad = a.count_include_pad;
  const bool col_major = a.column_major_indices;
  const T* px = x.ptr<const T>();
  T* py = y.ptr<T>();
parallel_for(planes, planes * out_sz * g.k_size(), [&](int64_t p_begin, int64_t p_end) XRT_ISA_LAMBDA {
  for (int64_t p = p_begin; p < p_end; ++p) {
      const T* xp = px + p * in_sz;
      T* yp = py + p * out_sz;
      for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
        for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
          for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
            const int64_t b0 = o0 * g.s[0] - g.pb[0], b1 = o1 * g.s[1] - g.pb[1],
                          b2 = o2 * g.s[2] - g.pb[2];
            C best = std::numeric_limits<C>::has_infinity ? -std::numeric_limits<C>::infinity()
                                                          : std::numeric_limits<C>::lowest();
            int64_t best_i = -1;
            double sum = 0;
            int64_t cnt = 0, cnt_pad = 0;
            for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
              const int64_t i0 = b0 + k0 * g.d[0];
              for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
                const int64_t i1 = b1 + k1 * g.d[1];
                for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
                  const int64_t i2 = b2 + k2 * g.d[2];
                  // Positions inside input+pads count for count_include_pad.
                  if (i0 < g.in[0] + g.pe[0] && i1 < g.in[1] + g.pe[1] && i2 < g.in[2] + g.pe[2])
                    ++cnt_pad;
                  if (i0 < 0 || i1 < 0 || i2 < 0 || i0 >= g.in[0] || i1 >= g.in[1] || i2 >= g.in[2])
                    continue;
                  const int64_t off = (i0 * g.in[1] + i1) * g.in[2] + i2;
                  const C v = N::load(xp[off]);
                  if (is_max) {
                    // The first NaN wins (and its index), as nan_max_step.
                    if (v > best || best_i < 0 || (v != v && best == best)) {
                      best = v;
                      best_i = off;
                    }
                  } else {
                    sum += v;
                    ++cnt;
                  }
                }
              }
            }
            const int64_t o = (o0 * g.out[1] + o1) * g.out[2] + o2;
            if (is_max) {
              yp[o] = N::store(best);
              if (idx) {
                int64_t flat = best_i;
                if (col_major && best_i >= 0) {  // column-major within the plane
                  const int64_t r2 = best_i % g.in[2], r1 = (best_i / g.in[2]) % g.in[1],
                                r0 = best_i / (g.in[2] * g.in[1]);
                  flat = (r2 * g.in[1] + r1) * g.in[0] + r0;
                }
                idx->ptr<int64_t>()[p * out_sz + o] = p * in_sz + flat;
              }
            } else {
              const int64_t div = include_pad ? cnt_pad : cnt;
              yp[o] = N::store(static_cast<C>(div > 0 ? sum / static_cast<double>(div) : 0.0));
            }
          }
  }
});
}

OpDef pool_def(const std::string& type, bool is_max) {
  OpDef d;
  d.op_type = type;
  d.kernel = "cpu";
  set_parsed_body<PoolAttrs>(d, [is_max](const PoolAttrs& a, const Node&,
                                          const std::vector<TensorView>& in,
                                          std::vector<TensorView>& out) {
    TensorView* idx = out.size() > 1 && out[1].data ? &out[1] : nullptr;
    visit_dtype(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (kIsFloat<T> || std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t>)
        pool_typed<T>(a, in[0], out[0], idx, is_max);
    });
  });
  return d;
}

OpDef global_pool_def(const std::string& type, bool is_max) {
  OpDef d;
  d.op_type = type;
  d.kernel = "cpu";
  d.run = [is_max](const Node&, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
    const int64_t planes = in[0].shape[0] * in[0].shape[1];
    const int64_t sz = planes ? in[0].numel() / planes : 0;
    visit_dtype(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      using N = Num<T>;
      if constexpr (kIsFloat<T>) {
        const T* x = in[0].ptr<const T>();
        T* y = out[0].ptr<T>();
parallel_for(planes, in[0].numel(), [&](int64_t p_begin, int64_t p_end) XRT_ISA_LAMBDA {
  for (int64_t p = p_begin; p < p_end; ++p) {
            double acc = is_max ? -INFINITY : 0.0;
            if (is_max) {
              for (int64_t i = 0; i < sz; ++i)
                acc = nan_max_step<double>(acc, N::load(x[p * sz + i]));
            } else {
              // Four running sums break the add latency chain (vectorizes); the
              // order is fixed, so results are deterministic.
              double part[4] = {0.0, 0.0, 0.0, 0.0};
              int64_t i = 0;
              for (; i + 4 <= sz; i += 4)
                for (int j = 0; j < 4; ++j) part[j] += N::load(x[p * sz + i + j]);
              for (; i < sz; ++i) part[0] += N::load(x[p * sz + i]);
              acc = (part[0] + part[1]) + (part[2] + part[3]);
              acc /= static_cast<double>(sz);
            }
            y[p] = N::store(static_cast<typename N::C>(acc));
  }
});
      }
    });
  };
  return d;
}

}  // namespace

void register_nn_pool_ops(std::vector<OpDef>& defs) {
  defs.push_back(pool_def("MaxPool", true));
  defs.push_back(pool_def("AveragePool", false));
  defs.push_back(global_pool_def("GlobalAveragePool", false));
  defs.push_back(global_pool_def("GlobalMaxPool", true));
}

}  // namespace xpuruntime::cpu
