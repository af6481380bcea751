// GatherND, ScatterND and ScatterElements (see index_impl.h for the contract:
// bad indices are recorded, never followed; scatters apply updates in the CPU
// kernel's order, one thread per destination slice or line).
#include "backends/cuda/kernels/common/device_types.cuh"
#include "backends/cuda/kernels/data/index_impl.h"

namespace xpuruntime::cuda_ops {
namespace {

using ops::ScatterReduction;

// The index value raw resolved against an axis of size dim (negatives from the
// end); false, with the first such case recorded in *err, when out of range.
template <typename I>
__device__ __forceinline__ bool resolve(I raw, int64_t dim, int axis, IndexError* err, int64_t& v) {
  v = static_cast<int64_t>(raw);
  if (v < 0) v += dim;
  if (v >= 0 && v < dim) return true;
  if (err != nullptr && atomicCAS(&err->flag, 0, 1) == 0) {
    err->axis = axis;
    err->index = static_cast<int64_t>(raw);
    err->dim = dim;
  }
  return false;
}

// The data offset (elements) of index tuple t.
template <typename I>
__device__ __forceinline__ bool nd_offset(const NDIndex& ix, const I* __restrict__ idx, int64_t t,
                                          IndexError* err, int64_t& off) {
  off = 0;
  for (int k = 0; k < ix.last; ++k) {
    int64_t v = 0;
    if (!resolve(idx[t * ix.last + k], ix.dims[k], ix.first_axis + k, err, v)) return false;
    off += v * ix.strides[k];
  }
  return true;
}

// reduce(a, b) as the CPU kernel's combine(): fp32 math for the 16-bit floats;
// max/min keep a when the comparison is false (a NaN update leaves a NaN-free
// value alone, a NaN already there stays).
template <ScatterReduction R, typename T>
__device__ __forceinline__ T combine(T a, T b) {
  if constexpr (R == ScatterReduction::kNone) {
    return b;
  } else {
    using C = compute_t<T>;
    const C x = load(a), y = load(b);
    C v = y;
    if constexpr (R == ScatterReduction::kAdd) v = static_cast<C>(x + y);
    if constexpr (R == ScatterReduction::kMul) v = static_cast<C>(x * y);
    if constexpr (R == ScatterReduction::kMax) v = x < y ? y : x;
    if constexpr (R == ScatterReduction::kMin) v = y < x ? y : x;
    return store<T>(v);
  }
}

template <typename E, typename I>
__global__ void gather_nd_kernel(const E* __restrict__ data, const I* __restrict__ idx,
                                 E* __restrict__ out, NDIndex ix, IndexError* err) {
  const int64_t n = ix.tuples * ix.inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t t = i / ix.inner;
    const int64_t j = i - t * ix.inner;
    int64_t off = 0;
    out[i] = nd_offset(ix, idx, t, err, off) ? data[(t / ix.per_batch) * ix.batch_stride + off + j]
                                             : E(0);
  }
}

// One thread per element j of a slice walks the tuples in order: the updates of
// one destination element are all applied by one thread, in the CPU's order.
template <ScatterReduction R, typename T, typename I>
__global__ void scatter_nd_kernel(const I* __restrict__ idx, const T* __restrict__ upd,
                                  T* __restrict__ out, NDIndex ix, IndexError* err) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < ix.inner;
       j += stride) {
    for (int64_t t = 0; t < ix.tuples; ++t) {
      int64_t off = 0;
      if (!nd_offset(ix, idx, t, err, off)) continue;
      T* p = out + off + j;
      *p = combine<R>(*p, upd[t * ix.inner + j]);
    }
  }
}

// One thread per line (the indices' coordinates other than axis) walks the axis
// in order: only updates of one line can meet at a destination.
template <ScatterReduction R, typename T, typename I>
__global__ void scatter_elements_kernel(const I* __restrict__ idx, const T* __restrict__ upd,
                                        T* __restrict__ out, ElementsScatterIndex ix,
                                        IndexError* err) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t count = ix.dims[ix.axis];
  for (int64_t l = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; l < ix.lines;
       l += stride) {
    int64_t r = l, base_d = 0, base_i = 0;
    for (int d = ix.rank - 1; d >= 0; --d) {
      if (d == ix.axis) continue;
      const int64_t q = r / ix.dims[d];
      const int64_t c = r - q * ix.dims[d];
      base_d += c * ix.data_strides[d];
      base_i += c * ix.index_strides[d];
      r = q;
    }
    for (int64_t k = 0; k < count; ++k) {
      const int64_t pos = base_i + k * ix.index_strides[ix.axis];
      int64_t v = 0;
      if (!resolve(idx[pos], ix.axis_len, ix.axis, err, v)) continue;
      T* p = out + base_d + v * ix.data_strides[ix.axis];
      *p = combine<R>(*p, upd[pos]);
    }
  }
}

template <typename F>
void visit_index_dtype(DType t, const char* what, F&& f) {
  if (t == DType::kInt32) return f(TypeTag<int32_t>{});
  if (t == DType::kInt64) return f(TypeTag<int64_t>{});
  XRT_THROW(UnsupportedOperationError, what, " (cuda): indices must be int32 or int64, got ",
            dtype_name(t));
}

// Calls f(TypeTag<T>{}, std::integral_constant<ScatterReduction, R>{}) with the
// element type a reduction needs: byte-generic for kNone, numeric otherwise.
template <typename F>
void visit_scatter(DType t, ScatterReduction r, const char* what, F&& f) {
  auto typed = [&](auto rc) {
    visit_dtype<TypeSet::kNumeric>(t, what, [&](auto tag) { f(tag, rc); });
  };
  switch (r) {
    case ScatterReduction::kNone:
      return visit_elem_size(dtype_size(t), what, [&](auto tag) {
        f(tag, std::integral_constant<ScatterReduction, ScatterReduction::kNone>{});
      });
    case ScatterReduction::kAdd:
      return typed(std::integral_constant<ScatterReduction, ScatterReduction::kAdd>{});
    case ScatterReduction::kMul:
      return typed(std::integral_constant<ScatterReduction, ScatterReduction::kMul>{});
    case ScatterReduction::kMax:
      return typed(std::integral_constant<ScatterReduction, ScatterReduction::kMax>{});
    case ScatterReduction::kMin:
      return typed(std::integral_constant<ScatterReduction, ScatterReduction::kMin>{});
  }
}

}  // namespace

void launch_gather_nd(std::size_t elem, const NDIndex& ix, const void* data, DType index_dtype,
                      const void* indices, void* out, IndexError* err, void* stream) {
  const int64_t n = ix.tuples * ix.inner;
  if (n <= 0) return;
  visit_elem_size(elem, "GatherND", [&](auto et) {
    using E = typename decltype(et)::type;
    visit_index_dtype(index_dtype, "GatherND", [&](auto it) {
      using I = typename decltype(it)::type;
      gather_nd_kernel<E, I><<<grid_for(n, 256), 256, 0, as_stream(stream)>>>(
          static_cast<const E*>(data), static_cast<const I*>(indices), static_cast<E*>(out), ix,
          err);
      XRT_CUDA_LAUNCH_CHECK();
    });
  });
}

void launch_scatter_nd(DType t, ScatterReduction r, const NDIndex& ix, const void* indices,
                       DType index_dtype, const void* updates, void* out, IndexError* err,
                       void* stream) {
  if (ix.tuples <= 0 || ix.inner <= 0) return;
  visit_scatter(t, r, "ScatterND", [&](auto tag, auto rc) {
    using T = typename decltype(tag)::type;
    visit_index_dtype(index_dtype, "ScatterND", [&](auto it) {
      using I = typename decltype(it)::type;
      scatter_nd_kernel<decltype(rc)::value, T, I>
          <<<grid_for(ix.inner, 128), 128, 0, as_stream(stream)>>>(static_cast<const I*>(indices),
                                                                   static_cast<const T*>(updates),
                                                                   static_cast<T*>(out), ix, err);
      XRT_CUDA_LAUNCH_CHECK();
    });
  });
}

void launch_scatter_elements(DType t, ScatterReduction r, const ElementsScatterIndex& ix,
                             const void* indices, DType index_dtype, const void* updates, void* out,
                             IndexError* err, void* stream) {
  if (ix.lines <= 0 || ix.dims[ix.axis] <= 0) return;
  visit_scatter(t, r, "ScatterElements", [&](auto tag, auto rc) {
    using T = typename decltype(tag)::type;
    visit_index_dtype(index_dtype, "ScatterElements", [&](auto it) {
      using I = typename decltype(it)::type;
      scatter_elements_kernel<decltype(rc)::value, T, I>
          <<<grid_for(ix.lines, 128), 128, 0, as_stream(stream)>>>(static_cast<const I*>(indices),
                                                                   static_cast<const T*>(updates),
                                                                   static_cast<T*>(out), ix, err);
      XRT_CUDA_LAUNCH_CHECK();
    });
  });
}

}  // namespace xpuruntime::cuda_ops
