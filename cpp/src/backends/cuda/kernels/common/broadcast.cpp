#include "backends/cuda/kernels/common/broadcast.h"

#include <algorithm>
#include <cstddef>

namespace xpuruntime::cuda_ops {

std::vector<int64_t> dense_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * std::max<int64_t>(shape[i], 1);
  return s;
}

FastDivisor make_fast_divisor(uint32_t divisor) {
  FastDivisor f;
  if (divisor == 0) return f;  // an empty dimension: the walk never divides by it
  f.divisor = divisor;
  while (f.shift < 32 && (uint64_t{1} << f.shift) < divisor) ++f.shift;
  const uint64_t one = 1;
  f.magic = static_cast<uint32_t>(((one << 32) * ((one << f.shift) - divisor)) / divisor + 1);
  return f;
}

bool fits_int32(int rank, int64_t numel, const int64_t* dims,
                std::initializer_list<const int64_t*> strides,
                std::initializer_list<int64_t> bases) {
  constexpr int64_t kLimit = int64_t{1} << 31;
  if (numel >= kLimit) return false;
  for (int64_t b : bases)
    if (b < 0 || b >= kLimit) return false;
  for (const int64_t* s : strides) {
    int64_t lo = 0, hi = 0;  // the offset range the walk reaches, relative to the base
    for (int d = 0; d < rank; ++d) {
      if (dims[d] <= 0) return true;  // nothing to walk
      const int64_t span = (dims[d] - 1) * s[d];
      (span < 0 ? lo : hi) += span;
      if (lo <= -kLimit || hi >= kLimit) return false;
    }
    for (int64_t b : bases)
      if (b + lo <= -kLimit || b + hi >= kLimit) return false;
  }
  return true;
}

namespace {

// Merges dim i into dim i-1 when every side's stride says the pair is one run:
// stride[i-1] == stride[i] * dims[i]. Works on a list of stride vectors.
void collapse(std::vector<int64_t>& dims, std::vector<std::vector<int64_t>*> sides) {
  // Drop size-1 dims first: they contribute nothing to any offset.
  std::vector<int64_t> d;
  std::vector<std::vector<int64_t>> s(sides.size());
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    d.push_back(dims[i]);
    for (std::size_t k = 0; k < sides.size(); ++k) s[k].push_back((*sides[k])[i]);
  }
  std::vector<int64_t> cd;
  std::vector<std::vector<int64_t>> cs(sides.size());
  for (std::size_t i = 0; i < d.size(); ++i) {
    bool merge = !cd.empty();
    for (std::size_t k = 0; merge && k < sides.size(); ++k) merge = cs[k].back() == s[k][i] * d[i];
    if (merge) {
      cd.back() *= d[i];
      for (std::size_t k = 0; k < sides.size(); ++k) cs[k].back() = s[k][i];
    } else {
      cd.push_back(d[i]);
      for (std::size_t k = 0; k < sides.size(); ++k) cs[k].push_back(s[k][i]);
    }
  }
  dims = std::move(cd);
  for (std::size_t k = 0; k < sides.size(); ++k) *sides[k] = std::move(cs[k]);
}

}  // namespace

bool make_broadcast_index(const std::vector<int64_t>& out,
                          const std::vector<std::vector<int64_t>>& inputs, StridedIndex& index) {
  index = StridedIndex{};
  index.operands = static_cast<int>(inputs.size());
  int64_t numel = 1;
  for (int64_t d : out) numel *= d;
  index.numel = numel;
  const std::size_t r = out.size();
  std::vector<int64_t> dims = out;
  std::vector<std::vector<int64_t>> strides(inputs.size(), std::vector<int64_t>(r, 0));
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const auto& in = inputs[k];
    const std::vector<int64_t> ds = dense_strides(in);
    const std::size_t off = r - in.size();
    int64_t in_numel = 1;
    for (std::size_t i = 0; i < in.size(); ++i) {
      in_numel *= in[i];
      strides[k][off + i] = in[i] == 1 ? 0 : ds[i];
    }
    index.scalar[k] = in_numel == 1;
    index.dense[k] = in_numel == numel;
  }
  std::vector<std::vector<int64_t>*> sides;
  for (auto& s : strides) sides.push_back(&s);
  collapse(dims, sides);
  if (dims.size() > static_cast<std::size_t>(kMaxRank)) return false;
  index.rank = static_cast<int>(dims.size());
  for (int i = 0; i < index.rank; ++i) {
    index.dims[i] = dims[i];
    for (std::size_t k = 0; k < inputs.size(); ++k) index.strides[k][i] = strides[k][i];
  }
  index.small = numel > 0 && fits_int32(index.rank, numel, index.dims,
                                        {index.strides[0], index.strides[1], index.strides[2]});
  if (index.small)
    for (int i = 0; i < index.rank; ++i)
      index.fast_dims[i] = make_fast_divisor(static_cast<uint32_t>(index.dims[i]));
  return true;
}

bool make_copy_index(const std::vector<int64_t>& dims, const std::vector<int64_t>& in_strides,
                     const std::vector<int64_t>& out_strides, int64_t in_base, int64_t out_base,
                     CopyIndex& index) {
  index = CopyIndex{};
  int64_t numel = 1;
  for (int64_t d : dims) numel *= d;
  index.numel = numel;
  index.in_base = in_base;
  index.out_base = out_base;
  std::vector<int64_t> d = dims, is = in_strides, os = out_strides;
  collapse(d, {&is, &os});
  if (d.size() > static_cast<std::size_t>(kMaxCopyRank)) return false;
  index.rank = static_cast<int>(d.size());
  for (int i = 0; i < index.rank; ++i) {
    index.dims[i] = d[i];
    index.in_strides[i] = is[i];
    index.out_strides[i] = os[i];
  }
  return true;
}

}  // namespace xpuruntime::cuda_ops
