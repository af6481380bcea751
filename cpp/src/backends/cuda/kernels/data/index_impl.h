// Plain-argument launchers of the index CUDA kernels: GatherND, ScatterND,
// ScatterElements. Pointers are device pointers of dense tensors; indices are
// int32 or int64, negatives count from the end.
//
// Out-of-range indices: a kernel cannot throw, so it never touches memory
// outside the tensors (GatherND writes zeros for the slice, the scatters skip
// the update) and records the first bad index it met in *err (device memory the
// caller zeroed before the launch, or null when the caller validated the
// indices on the host). The registry kernels read *err back after the launch
// and raise a typed error.
//
// The scatters apply their updates in the CPU kernel's order (index tuples, or
// positions along the axis, in increasing order): one thread owns every update
// of a destination, so duplicate indices give the CPU kernel's result (last
// write wins for reduction none) and the same bits run to run, with no atomics.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cuda/kernels/common/broadcast.h"
#include "xpuruntime/dtype.h"
#include "xpuruntime/ops/index.h"

namespace xpuruntime::cuda_ops {

// The most data dimensions an index plan addresses.
inline constexpr int kMaxIndexRank = 16;

// The first out-of-range index a kernel met (flag != 0): its value, the data
// axis it indexes and that axis' size.
struct IndexError {
  int32_t flag = 0;
  int32_t axis = 0;
  int64_t index = 0;
  int64_t dim = 0;
};

// GatherND / ScatterND: index tuples of `last` entries address data axes
// [first_axis, first_axis + last); each tuple selects a slice of `inner`
// elements.
struct NDIndex {
  int last = 0;
  int first_axis = 0;                   // batch_dims (GatherND), 0 (ScatterND)
  int64_t tuples = 0;                   // number of index tuples
  int64_t per_batch = 1;                // tuples per batch (GatherND with batch_dims)
  int64_t batch_stride = 0;             // data elements per batch
  int64_t inner = 1;                    // elements per slice
  int64_t dims[kMaxIndexRank] = {};     // data dims addressed by the tuple
  int64_t strides[kMaxIndexRank] = {};  // their dense strides in data
};

// GatherND: out[t * inner + j] = data[batch(t) * batch_stride + offset(tuple t)
// + j].
void launch_gather_nd(std::size_t elem, const NDIndex& ix, const void* data, DType index_dtype,
                      const void* indices, void* out, IndexError* err, void* stream);

// ScatterND on out (already holding data): out[offset(tuple t) + j] =
// reduce(out[...], updates[t * inner + j]), tuples in order. dtype: the
// reduction's element type (any dtype of 1, 2, 4 or 8 bytes for kNone; numeric
// dtypes otherwise).
void launch_scatter_nd(DType t, ops::ScatterReduction r, const NDIndex& ix, const void* indices,
                       DType index_dtype, const void* updates, void* out, IndexError* err,
                       void* stream);

// ScatterElements: indices and updates of shape dims; out (holding data) at the
// indices' coordinates with `axis` replaced by the index value.
struct ElementsScatterIndex {
  int rank = 0;
  int axis = 0;
  int64_t axis_len = 0;                       // data's size along axis
  int64_t lines = 0;                          // indices' elements / dims[axis]
  int64_t dims[kMaxIndexRank] = {};           // indices' (and updates') shape
  int64_t data_strides[kMaxIndexRank] = {};   // dense strides of data
  int64_t index_strides[kMaxIndexRank] = {};  // dense strides of indices
};
void launch_scatter_elements(DType t, ops::ScatterReduction r, const ElementsScatterIndex& ix,
                             const void* indices, DType index_dtype, const void* updates, void* out,
                             IndexError* err, void* stream);

}  // namespace xpuruntime::cuda_ops
