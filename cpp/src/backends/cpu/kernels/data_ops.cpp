// Data movement and constants: Concat, Split, Slice, Gather, Pad, Cast,
// ConstantOfShape, Constant, Range, Trilu, CumSum.
#include <atomic>
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels/broadcast.h"
#include "backends/cpu/kernels/elementwise.h"
#include "backends/cpu/kernels/shape_util.h"
#include "backends/cpu/kernels/isa_clones.h"
#include "backends/cpu/kernels/parallel.h"
#include "xpuruntime/ops/data.h"

namespace xpuruntime::cpu {

namespace {

OpDef make(const std::string& type) {
  OpDef d;
  d.op_type = type;
  d.kernel = "cpu";
  return d;
}

std::vector<Meta> metas_of(const std::vector<TensorView>& in) {
  std::vector<Meta> m(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    m[i].present = in[i].data != nullptr;
    m[i].dtype = in[i].dtype;
    m[i].shape = in[i].shape;
    m[i].data = in[i].data;
  }
  return m;
}

// GatherElements: out[e] = data[e with its `axis` coordinate replaced by idx[e]]. The
// indices' rows (all dimensions but the last) run in parallel; a row's data offset is
// computed once, then its elements are gathered with the element type's width (the last
// axis, relative-position attention's case, is a plain row gather). Returns -1, or the
// flat position of an index out of [-size, size) (the output is then incomplete).
template <typename E, typename I>
int64_t gather_elements_typed(const E* src, const I* idx, E* dst, const Shape& ds, const Shape& is,
                              int64_t axis) {
  const int64_t r = static_cast<int64_t>(is.size());
  const int64_t L = is[r - 1], rows = L > 0 ? shape_numel(is) / L : 0;
  Shape dstr(r, 1);
  for (int64_t i = r - 2; i >= 0; --i) dstr[i] = dstr[i + 1] * ds[i + 1];
  const int64_t size = ds[axis], step = dstr[axis];
  const bool last = axis == r - 1;
  std::atomic<int64_t> first_bad{-1};
  parallel_for(rows, rows * L, [&](int64_t r0, int64_t r1) XRT_ISA_LAMBDA {
    for (int64_t row = r0; row < r1; ++row) {
      int64_t rem = row, base = 0;
      for (int64_t i = r - 2; i >= 0; --i) {
        const int64_t c = rem % is[i];
        rem /= is[i];
        if (i != axis) base += c * dstr[i];
      }
      const I* ir = idx + row * L;
      E* yr = dst + row * L;
      const E* xr = src + base;
      // The row's index range first (a vectorized pass over data in L1 after it): in
      // range and non-negative, the gather runs without checks (vector gathers).
      int64_t lo = static_cast<int64_t>(ir[0]), hi = lo;
      for (int64_t j = 1; j < L; ++j) {
        const int64_t k = static_cast<int64_t>(ir[j]);
        lo = k < lo ? k : lo;
        hi = k > hi ? k : hi;
      }
      if (lo < -size || hi >= size) {
        for (int64_t j = 0; j < L; ++j) {
          const int64_t k = static_cast<int64_t>(ir[j]);
          if (k < -size || k >= size) {
            int64_t expected = -1;
            first_bad.compare_exchange_strong(expected, row * L + j);
            break;
          }
        }
        continue;
      }
      if (last && lo >= 0) {
        for (int64_t j = 0; j < L; ++j) yr[j] = xr[ir[j]];
      } else if (last) {
        for (int64_t j = 0; j < L; ++j) {
          const int64_t k = static_cast<int64_t>(ir[j]);
          yr[j] = xr[k < 0 ? k + size : k];
        }
      } else {
        for (int64_t j = 0; j < L; ++j) {
          const int64_t k = static_cast<int64_t>(ir[j]);
          yr[j] = xr[(k < 0 ? k + size : k) * step + j];
        }
      }
    }
  });
  return first_bad.load();
}

template <typename I>
int64_t gather_elements_index(const TensorView& data, const I* idx, TensorView& out, int64_t axis,
                              const Shape& is) {
  const Shape& ds = data.shape;
  switch (dtype_size(data.dtype)) {
    case 1:
      return gather_elements_typed(data.ptr<const uint8_t>(), idx, out.ptr<uint8_t>(), ds, is,
                                   axis);
    case 2:
      return gather_elements_typed(data.ptr<const uint16_t>(), idx, out.ptr<uint16_t>(), ds, is,
                                   axis);
    case 4:
      return gather_elements_typed(data.ptr<const uint32_t>(), idx, out.ptr<uint32_t>(), ds, is,
                                   axis);
    default:
      XRT_CHECK(dtype_size(data.dtype) == 8, UnsupportedOperationError,
                "GatherElements: element size ", dtype_size(data.dtype), " is not supported");
      return gather_elements_typed(data.ptr<const uint64_t>(), idx, out.ptr<uint64_t>(), ds, is,
                                   axis);
  }
}

int64_t gather_elements(const TensorView& data, const TensorView& indices, TensorView& out,
                        int64_t axis) {
  if (indices.numel() == 0) return -1;
  if (indices.dtype == DType::kInt32)
    return gather_elements_index(data, indices.ptr<const int32_t>(), out, axis, indices.shape);
  return gather_elements_index(data, indices.ptr<const int64_t>(), out, axis, indices.shape);
}

template <typename T>
void fill_value(void* dst, int64_t n, double v) {
  T* p = static_cast<T*>(dst);
  const T x = Num<T>::store(static_cast<typename Num<T>::C>(v));
  for (int64_t i = 0; i < n; ++i) p[i] = x;
}

// Pad: per output axis, the input index each output index reads (-1: the constant),
// so the per-element work is a table lookup; rows along the last axis are copied as
// a block where the input is contiguous (constant mode: fill, memcpy, fill).
int64_t pad_source(const std::string& mode, int64_t c, int64_t dim) {
  if (c >= 0 && c < dim) return c;
  if (mode == "constant") return -1;
  if (mode == "edge") return c < 0 ? 0 : dim - 1;
  if (mode == "wrap") return ((c % dim) + dim) % dim;
  const int64_t period = 2 * (dim - 1);  // reflect (dim >= 2, checked by the caller)
  c = ((c % period) + period) % period;
  return c >= dim ? period - c : c;
}

void pad_rows(const std::string& mode, const char* src, const Shape& s, char* dst, const Shape& o,
              const std::vector<int64_t>& full, std::size_t es, const unsigned char* cval) {
  const int64_t r = static_cast<int64_t>(o.size());
  const int64_t total = shape_numel(o);
  if (total == 0) return;
  if (r == 0) {
    std::memcpy(dst, src, es);
    return;
  }
  std::vector<std::vector<int64_t>> map(static_cast<std::size_t>(r));
  for (int64_t i = 0; i < r; ++i) {
    map[i].resize(static_cast<std::size_t>(o[i]));
    for (int64_t c = 0; c < o[i]; ++c) map[i][c] = pad_source(mode, c - full[i], s[i]);
  }
  Shape istr(r, 1);
  for (int64_t i = r - 2; i >= 0; --i) istr[i] = istr[i + 1] * s[i + 1];
  const int64_t width = o[r - 1], rows = total / width;
  const std::vector<int64_t>& last = map[r - 1];
  // The run of the last axis that is a straight copy of the input row.
  const int64_t lo = std::clamp<int64_t>(full[r - 1], 0, width);
  const int64_t hi = std::clamp<int64_t>(full[r - 1] + s[r - 1], lo, width);
  auto fill = [&](char* d, int64_t n) {
    for (int64_t k = 0; k < n; ++k) std::memcpy(d + k * es, cval, es);
  };
  parallel_for(rows, total, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      char* d = dst + static_cast<std::size_t>(row * width) * es;
      int64_t rem = row, off = 0;
      bool inside = true;
      for (int64_t i = r - 2; i >= 0 && inside; --i) {
        const int64_t c = map[i][rem % o[i]];
        rem /= o[i];
        if (c < 0) inside = false;
        off += c * istr[i];
      }
      if (!inside) {
        fill(d, width);
        continue;
      }
      const char* srow = src + static_cast<std::size_t>(off) * es;
      if (mode == "constant") {
        fill(d, lo);
        if (hi > lo) std::memcpy(d + lo * es, srow + (lo - full[r - 1]) * es, (hi - lo) * es);
        fill(d + hi * es, width - hi);
      } else {
        for (int64_t k = 0; k < width; ++k) std::memcpy(d + k * es, srow + last[k] * es, es);
      }
    }
  });
}

}  // namespace

void register_data_ops(std::vector<OpDef>& defs) {
  {
    OpDef d = make("Concat");
    set_parsed_body<ops::AxisAttrs>(d, [](const ops::AxisAttrs& a, const Node& n,
                                   const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      const Shape& o = out[0].shape;
      const int64_t axis = norm_axis(n, a.axis, static_cast<int64_t>(o.size()));
      const std::size_t es = dtype_size(out[0].dtype);
      int64_t outer = 1;
      for (int64_t i = 0; i < axis; ++i) outer *= o[i];
      const int64_t orow = out[0].numel() / std::max<int64_t>(1, outer);
      // Output row by output row (each input's piece in turn), split over the threads:
      // a concat on an inner axis (channels-last activations) is many short rows.
      std::vector<int64_t> rows(in.size()), offs(in.size());
      for (std::size_t i = 0, off = 0; i < in.size(); ++i) {
        rows[i] = outer ? in[i].numel() / outer : 0;
        offs[i] = static_cast<int64_t>(off);
        off += static_cast<std::size_t>(rows[i]);
      }
      char* dst = static_cast<char*>(out[0].data);
      parallel_for(outer, out[0].numel(), [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b)
          for (std::size_t i = 0; i < in.size(); ++i)
            std::memcpy(dst + (b * orow + offs[i]) * es,
                        static_cast<const char*>(in[i].data) + b * rows[i] * es, rows[i] * es);
      });
    });
    defs.push_back(std::move(d));
  }
  {
    OpDef d = make("Split");
    set_parsed_body<ops::AxisAttrs>(d, [](const ops::AxisAttrs& a, const Node& n,
                                   const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      const Shape& s = in[0].shape;
      const int64_t axis = norm_axis(n, a.axis, in[0].rank());
      const std::size_t es = dtype_size(in[0].dtype);
      int64_t outer = 1;
      for (int64_t i = 0; i < axis; ++i) outer *= s[i];
      const int64_t irow = outer ? in[0].numel() / outer : 0;
      int64_t off = 0;
      for (TensorView& t : out) {
        const int64_t row = outer ? t.numel() / outer : 0;
        if (t.data) {
          for (int64_t b = 0; b < outer; ++b)
            std::memcpy(static_cast<char*>(t.data) + b * row * es,
                        static_cast<const char*>(in[0].data) + (b * irow + off) * es, row * es);
        }
        off += row;
      }
    });
    defs.push_back(std::move(d));
  }
  {
    OpDef d = make("Slice");
    d.run = [](const Node& n, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      std::vector<int64_t> st, en, ax, sp;
      slice_inputs(n, metas_of(in), st, en, ax, sp);
      const Shape& s = in[0].shape;
      auto plan = slice_plan(n, s, st, en, ax, sp);
      if (out[0].numel() == 0) return;
      Shape istr(s.size(), 1);
      for (int64_t i = static_cast<int64_t>(s.size()) - 2; i >= 0; --i) istr[i] = istr[i + 1] * s[i + 1];
      int64_t base = 0;
      Shape ost;
      for (std::size_t i = 0; i < s.size(); ++i) {
        base += plan[i].start * istr[i];
        ost.push_back(plan[i].step * istr[i]);
      }
      const std::size_t es = dtype_size(in[0].dtype);
      strided_copy(static_cast<const char*>(in[0].data) + base * es, out[0].data, es,
                   out[0].shape, ost);
    };
    defs.push_back(std::move(d));
  }
  {
    OpDef d = make("Gather");
    set_parsed_body<ops::AxisAttrs>(d, [](const ops::AxisAttrs& a, const Node& n,
                                   const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      const Shape& s = in[0].shape;
      const int64_t axis = norm_axis(n, a.axis, in[0].rank());
      const int64_t dim = s[axis];
      // int64 indices are read in place unless one is negative (then a normalized copy).
      const int64_t n_idx = in[1].numel();
      auto in_range = [&](int64_t i) {
        XRT_CHECK(i >= -dim && i < dim, InvalidArgumentError, n.where(), ": index ", i,
                  " is out of range for axis ", axis, " of size ", dim);
        return i < 0;
      };
      const int64_t* ix =
          in[1].dtype == DType::kInt64 ? static_cast<const int64_t*>(in[1].data) : nullptr;
      bool negative = false;
      for (int64_t k = 0; ix != nullptr && k < n_idx; ++k) negative = in_range(ix[k]) || negative;
      std::vector<int64_t> copy;
      if (ix == nullptr || negative) {
        copy = in[1].ints();
        for (int64_t& i : copy)
          if (in_range(i)) i += dim;
        ix = copy.data();
      }
      int64_t outer = 1, inner = 1;
      for (int64_t i = 0; i < axis; ++i) outer *= s[i];
      for (int64_t i = axis + 1; i < in[0].rank(); ++i) inner *= s[i];
      const std::size_t es = dtype_size(in[0].dtype);
      const int64_t ni = n_idx;
      const char* src = static_cast<const char*>(in[0].data);
      char* dst = static_cast<char*>(out[0].data);
      const std::size_t row = static_cast<std::size_t>(inner) * es;
      // One row of `inner` elements per (outer, index) pair, the pair stepped without a
      // division per row; rows of 1-8 bytes (a gather of scalars) are copied as one typed
      // element through restrict pointers. LeViT's attention-bias gathers (154k scalars
      // each) took 590 us a call with the indices copied through int_at every run and a
      // division and memcpy call per row; 130 us now.
      auto scalars = [&](auto tag, int64_t b, int64_t e) {
        using T = decltype(tag);
        const T* __restrict from = reinterpret_cast<const T*>(src);
        T* __restrict to = reinterpret_cast<T*>(dst);
        const int64_t* __restrict at = ix;
        const int64_t n_idx = ni, d = dim;
        int64_t j = b % n_idx;
        const T* __restrict base = from + (b / n_idx) * d;
        for (int64_t k = b; k < e; ++k) {
          to[k] = base[at[j]];
          if (++j == n_idx) j = 0, base += d;
        }
      };
      parallel_for(outer * ni, out[0].numel(), [&](int64_t b, int64_t e) {
        switch (row) {
          case 1:
            return scalars(uint8_t{}, b, e);
          case 2:
            return scalars(uint16_t{}, b, e);
          case 4:
            return scalars(uint32_t{}, b, e);
          case 8:
            return scalars(uint64_t{}, b, e);
          default:
            break;
        }
        int64_t o = b / ni, j = b % ni;
        for (int64_t ob = b; ob < e; ++ob) {
          std::memcpy(dst + static_cast<std::size_t>(ob) * row,
                      src + static_cast<std::size_t>(o * dim + ix[j]) * row, row);
          if (++j == ni) j = 0, ++o;
        }
      });
    });
    defs.push_back(std::move(d));
  }
  {
    OpDef d = make("GatherElements");
    set_parsed_body<ops::AxisAttrs>(d, [](const ops::AxisAttrs& a, const Node& n,
                                   const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      const Shape& ds = in[0].shape;
      const Shape& is = in[1].shape;
      const int64_t r = in[0].rank();
      const int64_t axis = norm_axis(n, a.axis, r);
      for (int64_t i = 0; i < r; ++i)
        XRT_CHECK(i == axis || is[i] <= ds[i], InvalidArgumentError, n.where(),
                  ": indices shape ", shape_str(is), " exceeds data shape ", shape_str(ds));
      const int64_t bad = gather_elements(in[0], in[1], out[0], axis);
      XRT_CHECK(bad < 0, InvalidArgumentError, n.where(), ": index ",
                in[1].dtype == DType::kInt32 ? in[1].ptr<const int32_t>()[bad < 0 ? 0 : bad]
                                             : in[1].ptr<const int64_t>()[bad < 0 ? 0 : bad],
                " is out of range for axis ", axis, " of size ", ds[axis]);
    });
    defs.push_back(std::move(d));
  }
  {
    OpDef d = make("Pad");
    set_parsed_body<ops::PadAttrs>(d, [](const ops::PadAttrs& a, const Node& n,
                                   const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      std::vector<int64_t> pads = in.size() > 1 && in[1].data ? in[1].ints() : a.pads;
      std::vector<int64_t> axes = in.size() > 3 && in[3].data ? in[3].ints() : std::vector<int64_t>{};
      const Shape& s = in[0].shape;
      const Shape& o = out[0].shape;
      const int64_t r = in[0].rank();
      auto full = pad_full(n, pads, axes, r);
      const std::string& mode = a.mode;
      double cv = in.size() > 2 && in[2].data && in[2].numel() > 0
                      ? HostTensor::wrap(in[2].dtype, {}, in[2].data, nullptr).float_at(0)
                      : a.value;
      if (mode != "constant") {
        for (int64_t i = 0; i < r; ++i)
          XRT_CHECK(s[i] > 0 || o[i] == 0, InvalidModelError, n.where(), ": mode '", mode,
                    "' cannot pad an empty axis");
        if (mode == "reflect")
          for (int64_t i = 0; i < r; ++i)
            XRT_CHECK(s[i] > 1 || (full[i] <= 0 && full[i + r] <= 0), InvalidModelError, n.where(),
                      ": reflect padding needs at least 2 elements on padded axes");
      }
      const std::size_t es = dtype_size(in[0].dtype);
      alignas(16) unsigned char cval[16];
      visit_dtype(in[0].dtype, [&](auto tag) { fill_value<decltype(tag)>(cval, 1, cv); });
      pad_rows(mode, static_cast<const char*>(in[0].data), s, static_cast<char*>(out[0].data), o, full, es,
               cval);
    });
    defs.push_back(std::move(d));
  }
  {
    OpDef d = make("Cast");
    d.run = [](const Node&, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      cast_elements(in[0].dtype, in[0].data, out[0].dtype, out[0].data, in[0].numel());
    };
    defs.push_back(std::move(d));
  }
  {
    OpDef d = make("ConstantOfShape");
    d.run = [](const Node& n, const std::vector<TensorView>&, std::vector<TensorView>& out) {
      const graph::Attr* v = n.attr("value");
      if (v && v->kind == graph::Attr::Kind::kTensor && v->t.numel() > 0) {
        const std::size_t es = dtype_size(out[0].dtype);
        for (int64_t i = 0; i < out[0].numel(); ++i)
          std::memcpy(static_cast<char*>(out[0].data) + i * es, v->t.data, es);
      } else {
        std::memset(out[0].data, 0, out[0].nbytes());
      }
    };
    defs.push_back(std::move(d));
  }
  {
    OpDef d = make("Constant");
    d.run = [](const Node& n, const std::vector<TensorView>&, std::vector<TensorView>& out) {
      HostTensor t = constant_value(n);
      if (t.nbytes()) std::memcpy(out[0].data, t.data, t.nbytes());
    };
    defs.push_back(std::move(d));
  }
  {
    OpDef d = make("Range");
    d.run = [](const Node&, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      visit_dtype(out[0].dtype, [&](auto tag) {
        using T = decltype(tag);
        using N = Num<T>;
        using C = typename N::C;
        const C s = N::load(*in[0].ptr<const T>()), dl = N::load(*in[2].ptr<const T>());
        T* y = out[0].ptr<T>();
        for (int64_t i = 0; i < out[0].numel(); ++i) y[i] = N::store(static_cast<C>(s + static_cast<C>(i) * dl));
      });
    };
    defs.push_back(std::move(d));
  }
  {
    OpDef d = make("Trilu");
    set_parsed_body<ops::TriluAttrs>(d, [](const ops::TriluAttrs& a, const Node& n,
                                   const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      const int64_t k = in.size() > 1 && in[1].data ? in[1].ints()[0] : 0;
      const bool upper = a.upper;
      const Shape& s = in[0].shape;
      const int64_t rows = s[s.size() - 2], cols = s.back();
      const int64_t mats = rows * cols ? in[0].numel() / (rows * cols) : 0;
      const std::size_t es = dtype_size(in[0].dtype);
      const char* x = static_cast<const char*>(in[0].data);
      char* y = static_cast<char*>(out[0].data);
      for (int64_t b = 0; b < mats; ++b)
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) {
            const int64_t e = (b * rows + i) * cols + j;
            const bool keep = upper ? (j - i >= k) : (j - i <= k);
            if (keep) std::memcpy(y + e * es, x + e * es, es);
            else std::memset(y + e * es, 0, es);
          }
    });
    defs.push_back(std::move(d));
  }
  {
    OpDef d = make("CumSum");
    set_parsed_body<ops::CumSumAttrs>(d, [](const ops::CumSumAttrs& a, const Node& n,
                                   const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      const int64_t axis = norm_axis(n, in[1].ints().at(0), in[0].rank());
      const bool excl = a.exclusive, rev = a.reverse;
      const Shape& s = in[0].shape;
      int64_t outer = 1, inner = 1;
      for (int64_t i = 0; i < axis; ++i) outer *= s[i];
      for (int64_t i = axis + 1; i < in[0].rank(); ++i) inner *= s[i];
      const int64_t len = s[axis];
      visit_dtype(in[0].dtype, [&](auto tag) {
        using T = decltype(tag);
        using N = Num<T>;
        using C = typename N::C;
        const T* x = in[0].ptr<const T>();
        T* y = out[0].ptr<T>();
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            C acc = 0;
            for (int64_t t = 0; t < len; ++t) {
              const int64_t j = rev ? len - 1 - t : t;
              const int64_t e = (o * len + j) * inner + i;
              const C v = N::load(x[e]);
              if (excl) {
                y[e] = N::store(acc);
                acc = static_cast<C>(acc + v);
              } else {
                acc = static_cast<C>(acc + v);
                y[e] = N::store(acc);
              }
            }
          }
      });
    });
    defs.push_back(std::move(d));
  }
}

}  // namespace xpuruntime::cpu
