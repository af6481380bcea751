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

void alias_copy(const TensorView& a, TensorView& b) {
  if (a.data != b.data && a.nbytes()) std::memcpy(b.data, a.data, a.nbytes());
}

// Reshape & co.: the executor aliases the input when it can; run() copies otherwise.
OpDef alias_def(const std::string& type) {
  OpDef d;
  d.op_type = type;
  d.kernel = "cpu";
  d.run = [](const Node&, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
    alias_copy(in[0], out[0]);
  };
  return d;
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
  for (const char* t : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}) defs.push_back(alias_def(t));
  {
    OpDef d;
    d.op_type = "Shape";
    d.kernel = "cpu";
    d.run = [](const Node& n, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      auto [b, e] = shape_range(n, in[0].rank());
      for (int64_t i = b; i < e; ++i) out[0].ptr<int64_t>()[i - b] = in[0].shape[i];
    };
    defs.push_back(std::move(d));
  }
  {
    OpDef d;
    d.op_type = "Size";
    d.kernel = "cpu";
    d.run = [](const Node&, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      *out[0].ptr<int64_t>() = in[0].numel();
    };
    defs.push_back(std::move(d));
  }
  {
    OpDef d;
    d.op_type = "Expand";
    d.kernel = "cpu";
    d.run = [](const Node&, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      strided_copy(in[0].data, out[0].data, dtype_size(in[0].dtype), out[0].shape,
                   broadcast_strides(in[0].shape, out[0].shape));
    };
    defs.push_back(std::move(d));
  }
  {
    OpDef d;
    d.op_type = "Transpose";
    d.kernel = "cpu";
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
    d.kernel = "cpu";
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
