// Numpy-broadcast iteration for the elementwise kernels: input strides in the
// output's index space (0 on broadcast dimensions), adjacent dimensions merged
// where every operand is contiguous across them, and the outer loop split over
// OpenMP threads. The callback sees runs of `count` outputs with constant input
// strides, so the common cases (same shape, scalar, row bias) become one or a few
// long vectorizable loops.
#pragma once

#include <array>
#include <cstdint>

#include "backends/cpu/kernels/cpu_op.h"
#include "backends/cpu/kernels/parallel.h"
#include "backends/cpu/kernels/isa_clones.h"

namespace xpuruntime::cpu {

// Element strides of an input of shape `s` inside output shape `out`.
inline Shape broadcast_strides(const Shape& s, const Shape& out) {
  Shape st(out.size(), 0);
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(s.size()) - 1, j = static_cast<int64_t>(out.size()) - 1;
       i >= 0; --i, --j) {
    st[j] = s[i] == 1 ? 0 : acc;
    acc *= s[i];
  }
  return st;
}

template <std::size_t N, typename F>
void for_each_broadcast(const Shape& out_shape, std::array<Shape, N> strides, F&& f) {
  // Drop size-1 dims, then merge dims i-1 and i when all strides are compatible.
  Shape dims;
  std::array<Shape, N> st;
  for (std::size_t d = 0; d < out_shape.size(); ++d) {
    if (out_shape[d] == 1) continue;
    bool merge = !dims.empty();
    for (std::size_t k = 0; k < N && merge; ++k)
      merge = st[k].back() == strides[k][d] * out_shape[d];
    if (merge) {
      dims.back() *= out_shape[d];
      for (std::size_t k = 0; k < N; ++k) st[k].back() = strides[k][d];
    } else {
      dims.push_back(out_shape[d]);
      for (std::size_t k = 0; k < N; ++k) st[k].push_back(strides[k][d]);
    }
  }
  int64_t total = shape_numel(out_shape);
  if (total == 0) return;
  if (dims.empty()) {
    dims.push_back(1);
    for (std::size_t k = 0; k < N; ++k) st[k].push_back(0);
  }
  const int64_t r = static_cast<int64_t>(dims.size());
  const int64_t inner = dims[r - 1];
  const int64_t rows = total / inner;
  std::array<int64_t, N> inner_st;
  for (std::size_t k = 0; k < N; ++k) inner_st[k] = st[k][r - 1];
  auto row_offsets = [&](int64_t row, std::array<int64_t, N>& offs) {
    offs.fill(0);
    for (int64_t d = r - 2; d >= 0; --d) {
      int64_t idx = row % dims[d];
      row /= dims[d];
      for (std::size_t k = 0; k < N; ++k) offs[k] += idx * st[k][d];
    }
  };
  if (rows == 1) {
    // One long run: split it into blocks over the threads.
    constexpr int64_t kBlock = 16384;
    const int64_t blocks = (inner + kBlock - 1) / kBlock;
parallel_for(blocks, total, [&](int64_t b_begin, int64_t b_end) XRT_ISA_LAMBDA {
  for (int64_t b = b_begin; b < b_end; ++b) {
        const int64_t start = b * kBlock;
        std::array<int64_t, N> offs;
        for (std::size_t k = 0; k < N; ++k) offs[k] = start * inner_st[k];
        f(start, offs, std::min(kBlock, inner - start), inner_st);
  }
});
    return;
  }
  // Long rows: the callback parallelizes inside when it wants; short rows: split
  // the rows themselves.
parallel_for(rows, total, [&](int64_t row_begin, int64_t row_end) XRT_ISA_LAMBDA {
  for (int64_t row = row_begin; row < row_end; ++row) {
      std::array<int64_t, N> offs;
      row_offsets(row, offs);
      f(row * inner, offs, inner, inner_st);
  }
});
}

}  // namespace xpuruntime::cpu
