// Shape-changing ops that never look at element values beyond copying them:
// Reshape, Flatten, Squeeze, Unsqueeze (aliases of their input), Shape, Size,
// Expand, Transpose, Tile. Byte-level copies, so every dtype works.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "backends/cpu/ops/broadcast.h"
#include "backends/cpu/ops/shape_util.h"

namespace xpuruntime::cpu {
namespace {

// Values of an int input, or nullopt when unknown at this point.
std::optional<std::vector<int64_t>> int_input(const std::vector<Meta>& in, std::size_t i) {
  if (in.size() <= i || !in[i].present) return std::vector<int64_t>{};
  if (!in[i].has_value()) return std::nullopt;
  return in[i].ints();
}

Shape reshape_target(const Node& n, const Shape& in, const std::vector<int64_t>& spec) {
  const bool allowzero = n.attr_int("allowzero", 0) != 0;
  Shape out(spec.size());
  int64_t infer_at = -1, known = 1;
  for (std::size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (d == 0 && !allowzero) {
      XRT_CHECK(i < in.size(), InvalidModelError, n.where(), ": shape ", shape_str(spec),
                " copies dimension ", i, " (0) but the input ", shape_str(in), " has rank ", in.size());
      d = in[i];
    }
    if (d == -1) {
      XRT_CHECK(infer_at < 0, InvalidModelError, n.where(), ": shape ", shape_str(spec),
                " has more than one -1");
      infer_at = static_cast<int64_t>(i);
      continue;
    }
    XRT_CHECK(d >= 0, InvalidModelError, n.where(), ": invalid dimension ", d, " in shape ",
              shape_str(spec));
    out[i] = d;
    known *= d;
  }
  const int64_t total = shape_numel(in);
  if (infer_at >= 0) {
    XRT_CHECK(known != 0 && total % known == 0, InvalidModelError, n.where(), ": cannot reshape ",
              shape_str(in), " (", total, " elements) into ", shape_str(spec));
    out[infer_at] = total / known;
  }
  XRT_CHECK(shape_numel(out) == total, InvalidModelError, n.where(), ": cannot reshape ",
            shape_str(in), " (", total, " elements) into ", shape_str(out), " (", shape_numel(out),
            " elements)");
  return out;
}

void alias_copy(const TensorView& a, TensorView& b) {
  if (a.data != b.data && a.nbytes()) std::memcpy(b.data, a.data, a.nbytes());
}

OpDef alias_def(const std::string& type, const std::string& desc, InferFn infer) {
  OpDef d;
  d.op_type = type;
  d.key = op_key(type);
  d.kernel = "cpu";
  d.description = desc;
  d.alias = true;
  d.infer = std::move(infer);
  d.run = [](const Node&, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
    alias_copy(in[0], out[0]);
  };
  return d;
}

std::vector<int64_t> axes_of(const Node& n, const std::vector<Meta>& in, bool& known) {
  known = true;
  if (in.size() > 1 && in[1].present) {
    if (!in[1].has_value()) {
      known = false;
      return {};
    }
    return in[1].ints();
  }
  return n.attr_ints("axes", {});
}

}  // namespace

void strided_copy(const void* src, void* dst, std::size_t es, const Shape& out_shape,
                  const Shape& src_strides) {
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  switch (es) {
    default:
      for_each_broadcast<1>(out_shape, {src_strides},
                            [&](int64_t o, std::array<int64_t, 1> offs, int64_t cnt,
                                std::array<int64_t, 1> st) {
                              if (st[0] == 1) {
                                std::memcpy(d + o * es, s + offs[0] * es, cnt * es);
                              } else if (es == 4) {
                                auto* dd = reinterpret_cast<uint32_t*>(d) + o;
                                auto* ss = reinterpret_cast<const uint32_t*>(s) + offs[0];
                                for (int64_t i = 0; i < cnt; ++i) dd[i] = ss[i * st[0]];
                              } else if (es == 8) {
                                auto* dd = reinterpret_cast<uint64_t*>(d) + o;
                                auto* ss = reinterpret_cast<const uint64_t*>(s) + offs[0];
                                for (int64_t i = 0; i < cnt; ++i) dd[i] = ss[i * st[0]];
                              } else {
                                for (int64_t i = 0; i < cnt; ++i)
                                  std::memcpy(d + (o + i) * es, s + (offs[0] + i * st[0]) * es, es);
                              }
                            });
  }
}

void register_shape_ops(std::vector<OpDef>& defs) {
  defs.push_back(alias_def("Reshape", "Reshape (a view of its input)",
                           [](const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
                             require_inputs(n, in, 2);
                             out[0].present = true;
                             out[0].dtype = in[0].dtype;
                             if (!in[0].shape || !in[1].has_value()) return false;
                             out[0].shape = reshape_target(n, *in[0].shape, in[1].ints());
                             return true;
                           }));
  defs.push_back(alias_def("Flatten", "Flatten to 2-D (a view of its input)",
                           [](const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
                             require_inputs(n, in, 1);
                             out[0].present = true;
                             out[0].dtype = in[0].dtype;
                             if (!in[0].shape) return false;
                             const Shape& s = *in[0].shape;
                             int64_t axis = norm_axis(n, n.attr_int("axis", 1),
                                                      static_cast<int64_t>(s.size()), true);
                             int64_t a = 1, b = 1;
                             for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i)
                               (i < axis ? a : b) *= s[i];
                             out[0].shape = Shape{a, b};
                             return true;
                           }));
  defs.push_back(alias_def("Squeeze", "Squeeze (a view of its input)",
                           [](const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
                             require_inputs(n, in, 1);
                             out[0].present = true;
                             out[0].dtype = in[0].dtype;
                             bool known = true;
                             std::vector<int64_t> axes = axes_of(n, in, known);
                             if (!in[0].shape || !known) return false;
                             const Shape& s = *in[0].shape;
                             const int64_t r = static_cast<int64_t>(s.size());
                             std::vector<bool> drop(r, false);
                             if (axes.empty()) {
                               for (int64_t i = 0; i < r; ++i) drop[i] = s[i] == 1;
                             }
                             for (int64_t a : axes) {
                               int64_t ax = norm_axis(n, a, r);
                               XRT_CHECK(s[ax] == 1, InvalidModelError, n.where(),
                                         ": cannot squeeze axis ", a, " of size ", s[ax],
                                         " in shape ", shape_str(s));
                               drop[ax] = true;
                             }
                             Shape o;
                             for (int64_t i = 0; i < r; ++i)
                               if (!drop[i]) o.push_back(s[i]);
                             out[0].shape = o;
                             return true;
                           }));
  defs.push_back(alias_def("Unsqueeze", "Unsqueeze (a view of its input)",
                           [](const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
                             require_inputs(n, in, 1);
                             out[0].present = true;
                             out[0].dtype = in[0].dtype;
                             bool known = true;
                             std::vector<int64_t> axes = axes_of(n, in, known);
                             if (!in[0].shape || !known) return false;
                             const Shape& s = *in[0].shape;
                             const int64_t r = static_cast<int64_t>(s.size() + axes.size());
                             std::vector<bool> ins(r, false);
                             for (int64_t a : axes) {
                               int64_t ax = norm_axis(n, a, r);
                               XRT_CHECK(!ins[ax], InvalidModelError, n.where(), ": axis ", a,
                                         " repeated");
                               ins[ax] = true;
                             }
                             Shape o;
                             std::size_t j = 0;
                             for (int64_t i = 0; i < r; ++i) o.push_back(ins[i] ? 1 : s[j++]);
                             out[0].shape = o;
                             return true;
                           }));
  {
    OpDef d;
    d.op_type = "Shape";
    d.key = "shape";
    d.kernel = "cpu";
    d.description = "Shape (start/end), folded at compile time when the shape is known";
    d.infer = [](const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
      require_inputs(n, in, 1);
      out[0].present = true;
      out[0].dtype = DType::kInt64;
      if (!in[0].shape) return false;
      auto [b, e] = shape_range(n, in[0].rank());
      out[0].shape = Shape{e - b};
      return true;
    };
    d.run = [](const Node& n, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      auto [b, e] = shape_range(n, in[0].rank());
      for (int64_t i = b; i < e; ++i) out[0].ptr<int64_t>()[i - b] = in[0].shape[i];
    };
    defs.push_back(std::move(d));
  }
  {
    OpDef d;
    d.op_type = "Size";
    d.key = "size";
    d.kernel = "cpu";
    d.description = "Size (number of elements)";
    d.infer = [](const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
      require_inputs(n, in, 1);
      out[0] = out_meta(DType::kInt64, {});
      return true;
    };
    d.run = [](const Node&, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      *out[0].ptr<int64_t>() = in[0].numel();
    };
    defs.push_back(std::move(d));
  }
  {
    OpDef d;
    d.op_type = "Expand";
    d.key = "expand";
    d.kernel = "cpu";
    d.description = "Expand with numpy broadcasting";
    d.infer = [](const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
      require_inputs(n, in, 2);
      out[0].present = true;
      out[0].dtype = in[0].dtype;
      if (!in[0].shape || !in[1].has_value()) return false;
      out[0].shape = broadcast_shapes(n, {*in[0].shape, in[1].ints()});
      return true;
    };
    d.run = [](const Node&, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      strided_copy(in[0].data, out[0].data, dtype_size(in[0].dtype), out[0].shape,
                   broadcast_strides(in[0].shape, out[0].shape));
    };
    defs.push_back(std::move(d));
  }
  {
    OpDef d;
    d.op_type = "Transpose";
    d.key = "transpose";
    d.kernel = "cpu";
    d.description = "Transpose (any permutation)";
    d.infer = [](const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
      require_inputs(n, in, 1);
      out[0].present = true;
      out[0].dtype = in[0].dtype;
      if (!in[0].shape) return false;
      const Shape& s = *in[0].shape;
      std::vector<int64_t> perm = transpose_perm(n, static_cast<int64_t>(s.size()));
      Shape o;
      for (int64_t p : perm) o.push_back(s[p]);
      out[0].shape = o;
      return true;
    };
    d.run = [](const Node& n, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      const Shape& s = in[0].shape;
      std::vector<int64_t> perm = transpose_perm(n, in[0].rank());
      Shape st = Shape(s.size(), 1);
      for (int64_t i = static_cast<int64_t>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
      Shape ost;
      for (int64_t p : perm) ost.push_back(st[p]);
      strided_copy(in[0].data, out[0].data, dtype_size(in[0].dtype), out[0].shape, ost);
    };
    defs.push_back(std::move(d));
  }
  {
    OpDef d;
    d.op_type = "Tile";
    d.key = "tile";
    d.kernel = "cpu";
    d.description = "Tile";
    d.infer = [](const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
      require_inputs(n, in, 2);
      out[0].present = true;
      out[0].dtype = in[0].dtype;
      if (!in[0].shape || !in[1].has_value()) return false;
      std::vector<int64_t> rep = in[1].ints();
      const Shape& s = *in[0].shape;
      XRT_CHECK(rep.size() == s.size(), InvalidModelError, n.where(), ": repeats has ", rep.size(),
                " entries for an input of rank ", s.size());
      Shape o;
      for (std::size_t i = 0; i < s.size(); ++i) {
        XRT_CHECK(rep[i] >= 0, InvalidModelError, n.where(), ": negative repeat");
        o.push_back(s[i] * rep[i]);
      }
      out[0].shape = o;
      return true;
    };
    d.run = [](const Node&, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      // View the output as [rep0, s0, rep1, s1, ...] with the input's strides on s_i.
      const Shape& s = in[0].shape;
      const Shape& o = out[0].shape;
      Shape big, st;
      int64_t acc = 1;
      Shape in_st(s.size(), 1);
      for (int64_t i = static_cast<int64_t>(s.size()) - 1; i >= 0; --i) {
        in_st[i] = acc;
        acc *= s[i];
      }
      for (std::size_t i = 0; i < s.size(); ++i) {
        big.push_back(s[i] ? o[i] / s[i] : 0);
        st.push_back(0);
        big.push_back(s[i]);
        st.push_back(in_st[i]);
      }
      strided_copy(in[0].data, out[0].data, dtype_size(in[0].dtype), big, st);
    };
    defs.push_back(std::move(d));
  }
}

}  // namespace xpuruntime::cpu
