// Shape-changing ops that never look at element values beyond copying them:
// Reshape, Flatten, Squeeze, Unsqueeze (aliases of their input), Shape, Size,
// Expand, Transpose, Tile. Byte-level copies, so every dtype works.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "backends/cpu/kernels/broadcast.h"
#include "backends/cpu/kernels/isa_clones.h"
#include "backends/cpu/kernels/parallel.h"
#include "backends/cpu/kernels/shape_util.h"

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

// A transpose as few dims as it really has: size-1 dims dropped, and neighbours merged
// where the source strides continue each other ([N,C,H,W] -> [N,H,W,C] is [N, HW, C]
// with source strides [CHW, 1, HW]).
void coalesce(Shape& shape, Shape& strides) {
  Shape s, st;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!s.empty() && st.back() == strides[i] * shape[i]) {
      s.back() *= shape[i];
      st.back() = strides[i];
      continue;
    }
    s.push_back(shape[i]);
    st.push_back(strides[i]);
  }
  shape = std::move(s);
  strides = std::move(st);
}

// out[b][i][j] = src[b * sb + i + j * sj] for 4-byte elements: the layout changes
// (NCHW <-> NHWC) and moving attention's head_dim in front of the sequence are
// batched 2-D transposes. Tiles of 16 x 16 so both the reads (down
// a source column) and the writes (along an output row) stay in L1; split over the
// threads by (batch, row tile).
// One full 16 x 16 tile through a local buffer: 16 contiguous source reads of 16
// elements, 16 contiguous output writes; the compiler vectorizes both sides (its
// 16 x 16 register transpose at AVX-512, gathers elsewhere). Compiled per ISA level.
XRT_ISA_CLONES void tile_16x16(const uint32_t* s, int64_t sj, uint32_t* d, int64_t cols) {
  alignas(64) uint32_t t[16][16];
  for (int j = 0; j < 16; ++j)
    for (int i = 0; i < 16; ++i) t[i][j] = s[i + j * sj];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) d[i * cols + j] = t[i][j];
}

// Batches [b0, b1) of a transpose to C (2-4) columns: C source rows interleaved into
// one output row (ShuffleNet's channel shuffle with 2 groups, a 3-channel image to
// channels-last). With C a constant the compiler vectorizes the interleave; the
// 16 x 16 tiles would run their scalar edge path for every element here.
template <int C>
XRT_ISA_CLONES void interleave_rows(const uint32_t* src, uint32_t* dst, int64_t b0, int64_t b1,
                                    int64_t rows, int64_t sb, int64_t sj) {
  for (int64_t b = b0; b < b1; ++b) {
    const uint32_t* s = src + b * sb;
    uint32_t* d = dst + b * rows * C;
    for (int64_t i = 0; i < rows; ++i)
      for (int j = 0; j < C; ++j) d[i * C + j] = s[i + j * sj];
  }
}

void transpose_2d(const uint32_t* src, uint32_t* dst, int64_t batch, int64_t rows, int64_t cols,
                  int64_t sb, int64_t sj) {
  if (cols >= 2 && cols <= 4) {
    // Split by batch, or by rows when there is one batch (the image case).
    const bool by_rows = batch == 1;
    const int64_t units = by_rows ? rows : batch;
    parallel_for(units, batch * rows * cols, [&](int64_t u0, int64_t u1) {
      const uint32_t* s = by_rows ? src + u0 : src;
      uint32_t* d = by_rows ? dst + u0 * cols : dst;
      const int64_t b0 = by_rows ? 0 : u0, b1 = by_rows ? 1 : u1, r = by_rows ? u1 - u0 : rows;
      switch (cols) {
        case 2: return interleave_rows<2>(s, d, b0, b1, r, sb, sj);
        case 3: return interleave_rows<3>(s, d, b0, b1, r, sb, sj);
        default: return interleave_rows<4>(s, d, b0, b1, r, sb, sj);
      }
    });
    return;
  }
  constexpr int64_t kT = 16;
  const int64_t row_tiles = (rows + kT - 1) / kT;
  parallel_for(batch * row_tiles, batch * rows * cols, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / row_tiles, i0 = (t % row_tiles) * kT;
      const int64_t i1 = std::min(rows, i0 + kT);
      const uint32_t* sbase = src + b * sb;
      uint32_t* dbase = dst + b * rows * cols;
      for (int64_t j0 = 0; j0 < cols; j0 += kT) {
        const int64_t j1 = std::min(cols, j0 + kT);
        if (i1 - i0 == kT && j1 - j0 == kT) {
          tile_16x16(sbase + i0 + j0 * sj, sj, dbase + i0 * cols + j0, cols);
          continue;
        }
        for (int64_t i = i0; i < i1; ++i) {
          uint32_t* d = dbase + i * cols;
          for (int64_t j = j0; j < j1; ++j) d[j] = sbase[i + j * sj];
        }
      }
    }
  });
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
      const std::size_t es = dtype_size(in[0].dtype);
      Shape cs = out[0].shape, cst = ost;
      coalesce(cs, cst);
      // [B,] R, C with the rows contiguous in the source: a batched 2-D transpose.
      const std::size_t r = cs.size();
      if (es == 4 && (r == 2 || r == 3) && cst[r - 2] == 1) {
        transpose_2d(in[0].ptr<const uint32_t>(), out[0].ptr<uint32_t>(), r == 3 ? cs[0] : 1,
                     cs[r - 2], cs[r - 1], r == 3 ? cst[0] : 0, cst[r - 1]);
        return;
      }
      // Otherwise the strided copy, split over the outermost output dim.
      if (cs.size() >= 2 && cs[0] > 1 && out[0].numel() >= (1 << 16)) {
        const Shape inner(cs.begin() + 1, cs.end()), inner_st(cst.begin() + 1, cst.end());
        const int64_t per = shape_numel(inner);
        parallel_for(cs[0], out[0].numel(), [&](int64_t b0, int64_t b1) {
          for (int64_t b = b0; b < b1; ++b)
            strided_copy(static_cast<const char*>(in[0].data) + b * cst[0] * es,
                         static_cast<char*>(out[0].data) + b * per * es, es, inner, inner_st);
        });
        return;
      }
      strided_copy(in[0].data, out[0].data, es, cs.empty() ? Shape{1} : cs,
                   cst.empty() ? Shape{1} : cst);
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
