// Index plans for the CUDA op kernels, in plain arguments (no CUDA headers): the
// host builds them once in prepare() and passes them by value to the launchers.
//
// A StridedIndex walks a dense output of `dims` (collapsed: adjacent dimensions
// every operand traverses contiguously are merged, size-1 dimensions dropped) and
// gives each operand's element offset through its own strides (0 where the operand
// is broadcast). Rank after collapsing is at most kMaxRank.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace xpuruntime::cuda_ops {

inline constexpr int kMaxRank = 8;      // collapsed rank of any index plan
inline constexpr int kMaxOperands = 3;  // Where's cond, X, Y

// Division by a divisor fixed at launch, as a multiply-high, an add and a shift
// (Granlund & Montgomery; the form PyTorch's IntDivider uses). Exact for dividends
// below 2^31 and divisors in [1, 2^31). The index walks spend most of their time in
// divisions, and a 64-bit one is a ~70-instruction software routine on the GPU.
struct FastDivisor {
  uint32_t divisor = 1;
  uint32_t magic = 1;  // with shift 0: q = umulhi(n, 1) + n = n
  uint32_t shift = 0;
};
FastDivisor make_fast_divisor(uint32_t divisor);

// Whether offsets computed from `dims` and per-side `strides` (and bases) stay within
// int32: numel and every reachable offset below 2^31.
bool fits_int32(int rank, int64_t numel, const int64_t* dims,
                std::initializer_list<const int64_t*> strides,
                std::initializer_list<int64_t> bases = {});

struct StridedIndex {
  int rank = 0;  // 0: a single element (or numel == 0)
  int operands = 0;
  int64_t numel = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxOperands][kMaxRank] = {};
  // Operand k is read densely in output order (same shape as the output).
  bool dense[kMaxOperands] = {};
  // Operand k holds a single element (stride 0 everywhere).
  bool scalar[kMaxOperands] = {};
  // Every offset fits int32: the walk uses 32-bit math and the divisors below.
  bool small = false;
  FastDivisor fast_dims[kMaxRank] = {};
};

// The numpy broadcast of `inputs` (right-aligned) onto `out`, collapsed. Returns
// false when the collapsed rank exceeds kMaxRank (the caller refuses the case).
// `out` must be the broadcast shape of the inputs (the executor inferred it).
bool make_broadcast_index(const std::vector<int64_t>& out,
                          const std::vector<std::vector<int64_t>>& inputs, StridedIndex& index);

// Dense row-major strides (in elements) of a shape.
std::vector<int64_t> dense_strides(const std::vector<int64_t>& shape);

// A copy plan: out[o] = in[i] where both offsets come from one walk over `dims`
// (collapsed) with per-side strides (in elements, possibly negative for reversed
// slices) and base offsets. Transpose, Slice, Expand, Tile, Concat and Split are
// all one CopyIndex each (Concat and Split one per operand).
inline constexpr int kMaxCopyRank = 16;  // Tile doubles the rank before collapsing
struct CopyIndex {
  int rank = 0;
  int64_t numel = 0;
  int64_t dims[kMaxCopyRank] = {};
  int64_t in_strides[kMaxCopyRank] = {};
  int64_t out_strides[kMaxCopyRank] = {};
  int64_t in_base = 0;
  int64_t out_base = 0;
};

// Builds a CopyIndex from uncollapsed dims and strides, merging adjacent dims that
// both sides traverse contiguously and dropping size-1 dims. Returns false when the
// collapsed rank exceeds kMaxCopyRank.
bool make_copy_index(const std::vector<int64_t>& dims, const std::vector<int64_t>& in_strides,
                     const std::vector<int64_t>& out_strides, int64_t in_base, int64_t out_base,
                     CopyIndex& index);

}  // namespace xpuruntime::cuda_ops
