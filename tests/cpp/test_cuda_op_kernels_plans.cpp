// The host-side index plans of the CUDA op kernels (no device needed): numpy
// broadcasting collapsed into at most 8 dims, and strided copy plans. The plan
// code is plain C++ inside the CUDA plugin; it is compiled into this test directly
// so that CI without the plugin checks it too. Each plan is replayed on the host
// and compared element by element with a direct numpy-rule computation.
#include <gtest/gtest.h>

#include <random>

#include "backends/cuda/kernels/common/broadcast.cpp"  // NOLINT: the plan code under test

namespace xpuruntime::cuda_ops {
namespace {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// What the device kernel computes: offset of operand k at output index i.
int64_t plan_offset(const StridedIndex& ix, int k, int64_t i) {
  int64_t off = 0;
  for (int d = ix.rank - 1; d >= 0; --d) {
    off += (i % ix.dims[d]) * ix.strides[k][d];
    i /= ix.dims[d];
  }
  return off;
}

// The numpy rule, directly: right-aligned coordinates, size-1 dims read index 0.
int64_t numpy_offset(const Shape& in, const Shape& out, int64_t i) {
  int64_t off = 0, stride = 1;
  for (std::size_t d = out.size(); d-- > 0;) {
    const int64_t c = i % out[d];
    i /= out[d];
    if (d + in.size() < out.size()) continue;
    const std::size_t k = d + in.size() - out.size();
    if (in[k] != 1) off += c * stride;
    stride *= in[k];
  }
  return off;
}

Shape broadcast_of(const std::vector<Shape>& ins) {
  std::size_t r = 0;
  for (const Shape& s : ins) r = std::max(r, s.size());
  Shape out(r, 1);
  for (const Shape& s : ins)
    for (std::size_t i = 0; i < s.size(); ++i)
      if (s[i] != 1) out[r - s.size() + i] = s[i];
  return out;
}

TEST(CudaOpPlans, BroadcastIndexMatchesNumpyOnRandomShapes) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const int rank = 1 + static_cast<int>(rng() % 6);
    Shape out(static_cast<std::size_t>(rank));
    for (int64_t& d : out) d = 1 + static_cast<int64_t>(rng() % 4);
    std::vector<Shape> ins(2 + rng() % 2);
    for (Shape& s : ins) {
      const std::size_t r = 1 + rng() % static_cast<std::size_t>(rank);
      s.assign(out.end() - static_cast<std::ptrdiff_t>(r), out.end());
      for (int64_t& d : s)
        if (rng() % 3 == 0) d = 1;
    }
    const Shape o = broadcast_of(ins);
    StridedIndex ix;
    ASSERT_TRUE(make_broadcast_index(o, ins, ix));
    ASSERT_EQ(ix.numel, numel(o));
    for (std::size_t k = 0; k < ins.size(); ++k) {
      EXPECT_EQ(ix.dense[k], numel(ins[k]) == numel(o));
      EXPECT_EQ(ix.scalar[k], numel(ins[k]) == 1);
      for (int64_t i = 0; i < numel(o); ++i)
        ASSERT_EQ(plan_offset(ix, static_cast<int>(k), i), numpy_offset(ins[k], o, i))
            << "trial " << trial << " operand " << k << " index " << i;
    }
  }
}

TEST(CudaOpPlans, BroadcastCollapsesAndRefusesBeyondRankEight) {
  StridedIndex ix;
  // [2,3,4] + [4]: two collapsed dims ([6, 4]).
  ASSERT_TRUE(make_broadcast_index({2, 3, 4}, {{2, 3, 4}, {4}}, ix));
  EXPECT_EQ(ix.rank, 2);
  // Same shapes: one dim.
  ASSERT_TRUE(make_broadcast_index({5, 6, 7}, {{5, 6, 7}, {5, 6, 7}}, ix));
  EXPECT_EQ(ix.rank, 1);
  // Rank-12 tensors collapse to 1 when the shapes agree.
  const Shape big(12, 2);
  ASSERT_TRUE(make_broadcast_index(big, {big, big}, ix));
  EXPECT_EQ(ix.rank, 1);
  // Alternating broadcast patterns do not collapse: rank 9 is refused.
  const Shape a = {2, 1, 2, 1, 2, 1, 2, 1, 2}, b = {1, 3, 1, 3, 1, 3, 1, 3, 1};
  EXPECT_FALSE(make_broadcast_index(broadcast_of({a, b}), {a, b}, ix));
  // Scalars and empty tensors.
  ASSERT_TRUE(make_broadcast_index({}, {{}, {}}, ix));
  EXPECT_EQ(ix.numel, 1);
  ASSERT_TRUE(make_broadcast_index({0, 3}, {{0, 3}, {3}}, ix));
  EXPECT_EQ(ix.numel, 0);
}

TEST(CudaOpPlans, CopyIndexReplaysATransposeAndAReversedSlice) {
  // Transpose [2,3,4] by perm (2,0,1): out dims (4,2,3), in strides (1,12,4).
  CopyIndex ix;
  ASSERT_TRUE(make_copy_index({4, 2, 3}, {1, 12, 4}, dense_strides({4, 2, 3}), 0, 0, ix));
  std::vector<int64_t> got(24);
  for (int64_t i = 0; i < ix.numel; ++i) {
    int64_t r = i, io = ix.in_base, oo = ix.out_base;
    for (int d = ix.rank - 1; d >= 0; --d) {
      io += (r % ix.dims[d]) * ix.in_strides[d];
      oo += (r % ix.dims[d]) * ix.out_strides[d];
      r /= ix.dims[d];
    }
    got[static_cast<std::size_t>(oo)] = io;
  }
  for (int64_t c = 0; c < 4; ++c)
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < 3; ++b)
        EXPECT_EQ(got[static_cast<std::size_t>((c * 2 + a) * 3 + b)], (a * 3 + b) * 4 + c);
  // x[::-1] of 7 elements: base 6, stride -1; one dim.
  ASSERT_TRUE(make_copy_index({7}, {-1}, {1}, 6, 0, ix));
  EXPECT_EQ(ix.rank, 1);
  EXPECT_EQ(ix.in_base, 6);
  EXPECT_EQ(ix.in_strides[0], -1);
  // Dense on both sides collapses to one dim; size-1 dims vanish.
  ASSERT_TRUE(make_copy_index({3, 1, 5}, {5, 5, 1}, {5, 5, 1}, 0, 0, ix));
  EXPECT_EQ(ix.rank, 1);
  EXPECT_EQ(ix.dims[0], 15);
}

}  // namespace
}  // namespace xpuruntime::cuda_ops
