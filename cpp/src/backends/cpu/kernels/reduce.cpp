// Reductions: ReduceSum/Mean/Max/Min/Prod/SumSquare/L1/L2/LogSumExp, axes from the
// attribute (older opsets) or input 1 (ReduceSum >= 13, the others >= 18).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/cpu/kernels/cpu_op.h"
#include "backends/cpu/kernels/parallel.h"
#include "backends/cpu/kernels/isa_clones.h"
#include "xpuruntime/ops/shape_rules.h"

namespace xpuruntime::cpu {
namespace {

using ops::reduce_axes;
using ops::reduced_shape;

enum class Red { kSum, kMean, kMax, kMin, kProd, kSumSquare, kL1, kL2, kLogSumExp };


// Integer reductions wrap modulo 2^N, as numpy and ONNX Runtime do, instead of
// overflowing a signed type (undefined behaviour; the graph fuzzer's ReduceProd).
template <typename A>
constexpr bool kWraps = std::is_integral_v<A> && !std::is_same_v<A, bool>;
template <typename A>
A wrap_mul(A a, A b) {
  if constexpr (kWraps<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
  } else if constexpr (std::is_same_v<A, bool>) {
    return a && b;
  } else {
    return a * b;
  }
}
template <typename A>
A wrap_add(A a, A b) {
  if constexpr (kWraps<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <typename A>
A wrap_abs(A v) {
  if constexpr (kWraps<A>) {
    using U = std::make_unsigned_t<A>;
    return v < 0 ? static_cast<A>(U{0} - static_cast<U>(v)) : v;
  } else if constexpr (std::is_same_v<A, bool>) {
    return v;
  } else {
    return v < 0 ? -v : v;
  }
}

// A float sum or mean whose reduced axes form one run with kept axes after it: the
// input is [O, R, I] with I > 1 (a channels-last global pool reads [1, H*W, C]). Each
// output is the same r-ascending double sum as the general path's, with the loops
// swapped so the inner one walks I contiguous elements instead of gathering R strided
// ones (MnasNet's [1, 7, 7, 1280] mean: 65 -> 9 us). Same bits as the general path.
// False when the reduction is not of that form.
template <typename T>
bool reduce_outer_run(Red kind, const T* x, T* y, const Shape& shape, const std::vector<bool>& red) {
  using N = Num<T>;
  using C = typename N::C;
  if constexpr (!std::is_floating_point_v<C>) {
    return false;
  } else {
    if (kind != Red::kSum && kind != Red::kMean) return false;
    const int64_t rank = static_cast<int64_t>(shape.size());
    int64_t a0 = -1, a1 = -1;
    for (int64_t i = 0; i < rank; ++i) {
      if (!red[i]) continue;
      if (a0 < 0) a0 = i;
      else if (a1 != i - 1) return false;  // a second run of reduced axes
      a1 = i;
    }
    if (a0 < 0 || a1 == rank - 1) return false;
    int64_t outer = 1, r_n = 1, inner = 1;
    for (int64_t i = 0; i < rank; ++i) (i < a0 ? outer : i <= a1 ? r_n : inner) *= shape[i];
    if (inner <= 1 || r_n == 0) return false;
    constexpr int64_t kBlock = 256;
    const int64_t blocks = (inner + kBlock - 1) / kBlock;
    const double count = static_cast<double>(r_n);
    parallel_for(outer * blocks, outer * r_n * inner, [&](int64_t b0, int64_t b1) XRT_ISA_LAMBDA {
      double acc[kBlock];
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t o = b / blocks, i0 = (b % blocks) * kBlock;
        const int64_t n = std::min(kBlock, inner - i0);
        std::fill_n(acc, n, 0.0);
        const T* p = x + o * r_n * inner + i0;
        for (int64_t r = 0; r < r_n; ++r, p += inner)
          for (int64_t i = 0; i < n; ++i) acc[i] += static_cast<double>(N::load(p[i]));
        T* out = y + o * inner + i0;
        for (int64_t i = 0; i < n; ++i)
          out[i] = N::store(static_cast<C>(kind == Red::kMean ? acc[i] / count : acc[i]));
      }
    });
    return true;
  }
}

template <typename T>
void reduce_typed(Red kind, const T* x, T* y, const Shape& shape, const std::vector<int64_t>& axes) {
  using N = Num<T>;
  using C = typename N::C;
  using Acc = std::conditional_t<std::is_floating_point_v<C>, double, C>;
  const int64_t rank = static_cast<int64_t>(shape.size());
  // Output strides in input index space (0 on reduced axes), for the general path.
  std::vector<bool> red(rank, false);
  for (int64_t a : axes) red[a] = true;
  if (reduce_outer_run(kind, x, y, shape, red)) return;
  int64_t out_n = 1, r_n = 1;
  for (int64_t i = 0; i < rank; ++i) (red[i] ? r_n : out_n) *= shape[i];
  // Gather input offsets: out index -> base offset; reduced index -> offset.
  Shape in_strides(rank, 1);
  for (int64_t i = rank - 2; i >= 0; --i) in_strides[i] = in_strides[i + 1] * shape[i + 1];
  Shape kept_dims, kept_str, red_dims, red_str;
  for (int64_t i = 0; i < rank; ++i) {
    (red[i] ? red_dims : kept_dims).push_back(shape[i]);
    (red[i] ? red_str : kept_str).push_back(in_strides[i]);
  }
  std::vector<int64_t> red_off(static_cast<std::size_t>(r_n));
  for (int64_t r = 0; r < r_n; ++r) {
    int64_t rem = r, off = 0;
    for (int64_t d = static_cast<int64_t>(red_dims.size()) - 1; d >= 0; --d) {
      off += (rem % red_dims[d]) * red_str[d];
      rem /= red_dims[d];
    }
    red_off[r] = off;
  }
  const double count = static_cast<double>(r_n);
parallel_for(out_n, out_n * r_n, [&](int64_t o_begin, int64_t o_end) XRT_ISA_LAMBDA {
  for (int64_t o = o_begin; o < o_end; ++o) {
      int64_t rem = o, base = 0;
      for (int64_t d = static_cast<int64_t>(kept_dims.size()) - 1; d >= 0; --d) {
        base += (rem % kept_dims[d]) * kept_str[d];
        rem /= kept_dims[d];
      }
      const T* p = x + base;
      Acc acc;
      switch (kind) {
        case Red::kMax: {
          C m = std::numeric_limits<C>::lowest();
          if constexpr (std::is_floating_point_v<C>) m = -std::numeric_limits<C>::infinity();
          for (int64_t r = 0; r < r_n; ++r) {
            C v = N::load(p[red_off[r]]);
            if constexpr (std::is_floating_point_v<C>) {
              if (std::isnan(v)) { m = v; break; }
            }
            m = v > m ? v : m;
          }
          y[o] = N::store(m);
          continue;
        }
        case Red::kMin: {
          C m = std::numeric_limits<C>::max();
          if constexpr (std::is_floating_point_v<C>) m = std::numeric_limits<C>::infinity();
          for (int64_t r = 0; r < r_n; ++r) {
            C v = N::load(p[red_off[r]]);
            if constexpr (std::is_floating_point_v<C>) {
              if (std::isnan(v)) { m = v; break; }
            }
            m = v < m ? v : m;
          }
          y[o] = N::store(m);
          continue;
        }
        case Red::kProd:
          acc = 1;
          for (int64_t r = 0; r < r_n; ++r) acc = wrap_mul(acc, static_cast<Acc>(N::load(p[red_off[r]])));
          break;
        case Red::kLogSumExp: {
          double m = -std::numeric_limits<double>::infinity();
          for (int64_t r = 0; r < r_n; ++r) m = std::max(m, static_cast<double>(N::load(p[red_off[r]])));
          double s = 0;
          for (int64_t r = 0; r < r_n; ++r) s += std::exp(static_cast<double>(N::load(p[red_off[r]])) - m);
          y[o] = N::store(saturate_to<C>(r_n == 0 ? m : m + std::log(s)));
          continue;
        }
        default: {
          acc = 0;
          for (int64_t r = 0; r < r_n; ++r) {
            Acc v = static_cast<Acc>(N::load(p[red_off[r]]));
            if (kind == Red::kSumSquare || kind == Red::kL2) v = wrap_mul(v, v);
            else if (kind == Red::kL1) v = wrap_abs(v);
            acc = wrap_add(acc, v);
          }
          if (kind == Red::kL2) acc = saturate_to<Acc>(std::sqrt(static_cast<double>(acc)));
          if (kind == Red::kMean) {
            if constexpr (std::is_floating_point_v<Acc>) acc = acc / count;
            else acc = r_n ? static_cast<Acc>(acc / r_n) : 0;
          }
        }
      }
      y[o] = N::store(static_cast<C>(acc));
  }
});
}

OpDef reduce_def(const std::string& type, Red kind) {
  OpDef d;
  d.op_type = type;
  d.kernel = "cpu";
  // Attributes parsed once per step; axes from input 1 resolved per run.
  set_parsed_body<ops::ReduceAttrs>(d, [kind](const ops::ReduceAttrs& a, const Node&,
                                              const std::vector<TensorView>& in,
                                              std::vector<TensorView>& out) {
    std::vector<Meta> metas(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
      metas[i].present = in[i].data != nullptr;
      metas[i].dtype = in[i].dtype;
      metas[i].shape = in[i].shape;
      metas[i].data = in[i].data;
    }
    std::vector<int64_t> axes;
    bool noop = false;
    reduce_axes(a, metas, in[0].rank(), axes, noop);
    if (noop) axes.clear();
    visit_dtype(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      reduce_typed<T>(kind, in[0].ptr<const T>(), out[0].ptr<T>(), in[0].shape, axes);
    });
  });
  return d;
}

}  // namespace

void register_reduce_ops(std::vector<OpDef>& defs) {
  defs.push_back(reduce_def("ReduceSum", Red::kSum));
  defs.push_back(reduce_def("ReduceMean", Red::kMean));
  defs.push_back(reduce_def("ReduceMax", Red::kMax));
  defs.push_back(reduce_def("ReduceMin", Red::kMin));
  defs.push_back(reduce_def("ReduceProd", Red::kProd));
  defs.push_back(reduce_def("ReduceSumSquare", Red::kSumSquare));
  defs.push_back(reduce_def("ReduceL1", Red::kL1));
  defs.push_back(reduce_def("ReduceL2", Red::kL2));
  defs.push_back(reduce_def("ReduceLogSumExp", Red::kLogSumExp));
}

}  // namespace xpuruntime::cpu
