// Plain-argument launchers of the data-movement CUDA kernels. They move bytes, not
// values: every launcher takes the element size (1, 2, 4 or 8 bytes) and works
// for any dtype of that size. Pointers are device pointers of dense tensors.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cuda/kernels/common/broadcast.h"
#include "xpuruntime/dtype.h"

namespace xpuruntime::cuda_ops {

// out[out_base + sum(i_d * out_strides_d)] = in[in_base + sum(i_d * in_strides_d)]
// for every index i of ix.dims (Transpose, Slice, Expand, Tile, Concat, Split).
void launch_copy(std::size_t elem, const CopyIndex& ix, const void* in, void* out, void* stream);

// Concat of up to kConcatMaxInputs dense inputs in one launch: each input k is
// [rows, width_bytes[k]] and lands at byte column col_bytes[k] of the output's rows
// (out_row_bytes wide). One launch instead of one copy per input: DenseNet's concats
// of up to 25 pieces were 593 launches of ~2 us each per run. Returns false (nothing
// launched) when the sizes do not fit its 32-bit indexing; callers then copy per input.
inline constexpr int kConcatMaxInputs = 32;
bool launch_concat(int count, const void* const* inputs, const int64_t* width_bytes,
                   const int64_t* col_bytes, int64_t rows, int64_t out_row_bytes, void* out,
                   void* stream);

// in [batch, rows, cols] -> out [batch, cols, rows] through 32x32 shared-memory tiles.
void launch_transpose_tiled(std::size_t elem, int64_t batch, int64_t rows, int64_t cols,
                            const void* in, void* out, void* stream);

// Gather along the middle axis of data [outer, axis_len, inner] with `count`
// indices (int32 or int64; negatives count from the end): out [outer, count,
// inner]. An index outside [-axis_len, axis_len) writes zeros (as ONNX Runtime's
// CUDA kernel does; the device cannot throw).
void launch_gather(std::size_t elem, int64_t outer, int64_t axis_len, int64_t count, int64_t inner,
                   const void* data, DType index_dtype, const void* indices, void* out,
                   void* stream);

// GatherElements: out has the indices' shape; out[i] = data[i with coordinate
// `axis` replaced by indices[i]] (negatives from the end; out of range -> zeros).
struct ElementsIndex {
  int rank = 0;
  int axis = 0;
  int64_t axis_len = 0;
  int64_t numel = 0;
  int64_t dims[kMaxRank] = {};          // the indices' (and output's) shape
  int64_t data_strides[kMaxRank] = {};  // dense strides of data
};
void launch_gather_elements(std::size_t elem, const ElementsIndex& ix, const void* data,
                            DType index_dtype, const void* indices, void* out, void* stream);

// Pad: out coordinate o maps to input coordinate o - begin[d]; outside the input
// the mode decides: constant (the device scalar `value`, or when null the element
// whose bytes are the low bytes of `value_bits`), reflect, edge, wrap. Negative
// pads crop.
enum class PadMode : int32_t { kConstant, kReflect, kEdge, kWrap };
struct PadIndex {
  int rank = 0;
  int64_t numel = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t in_dims[kMaxRank] = {};
  int64_t begin[kMaxRank] = {};
};
void launch_pad(std::size_t elem, const PadIndex& ix, PadMode mode, const void* in,
                const void* value, uint64_t value_bits, void* out, void* stream);

// Trilu over the last two dims of [batch, rows, cols]: keeps j - i >= k (upper) or
// j - i <= k (lower), zeros elsewhere.
void launch_trilu(std::size_t elem, int64_t batch, int64_t rows, int64_t cols, int64_t k,
                  bool upper, const void* in, void* out, void* stream);

// out[i] = the element whose bytes are the low bytes of value_bits (n elements).
void launch_fill(std::size_t elem, int64_t n, uint64_t value_bits, void* out, void* stream);

// out[0..n) = values[0..n) as int64 (n <= kMaxCopyRank): Shape and Size. The values
// travel as kernel parameters, so the write is asynchronous and capturable.
void launch_write_ints(const int64_t* values, int n, void* out, void* stream);

// Range: out[i] = start + i * delta (start and delta are device scalars of t).
void launch_range(DType t, const void* start, const void* delta, void* out, int64_t n,
                  void* stream);

}  // namespace xpuruntime::cuda_ops
