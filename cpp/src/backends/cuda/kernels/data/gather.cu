// Gather and GatherElements, byte-generic, int32 or int64 indices. An index out of
// range writes zeros: a kernel cannot raise, and ONNX Runtime's CUDA kernels do
// the same.
#include "backends/cuda/kernels/common/device_types.cuh"
#include "backends/cuda/kernels/data/data_impl.h"

namespace xpuruntime::cuda_ops {
namespace {

template <typename E, typename I>
__global__ void gather_kernel(const E* __restrict__ data, const I* __restrict__ idx,
                              E* __restrict__ out, int64_t outer, int64_t axis_len, int64_t count,
                              int64_t inner) {
  const int64_t n = outer * count * inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t in = i % inner;
    const int64_t j = (i / inner) % count;
    const int64_t o = i / (inner * count);
    int64_t k = static_cast<int64_t>(idx[j]);
    if (k < 0) k += axis_len;
    out[i] = (k >= 0 && k < axis_len) ? data[(o * axis_len + k) * inner + in] : E(0);
  }
}

// The same with 32-bit offsets and precomputed divisors (every offset below 2^31),
// in units of E that may be whole vectors of the inner run (E = 16 bytes for a row
// of 8 halves): one index read and one vector moved per thread.
template <typename E, typename I>
__global__ void gather32_kernel(const E* __restrict__ data, const I* __restrict__ idx,
                                E* __restrict__ out, uint32_t n, int32_t axis_len,
                                FastDivisor count, FastDivisor inner) {
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint32_t row = fast_div(inner, i);
    const uint32_t in = i - row * inner.divisor;
    const uint32_t o = fast_div(count, row);
    const uint32_t j = row - o * count.divisor;
    int64_t k = static_cast<int64_t>(idx[j]);
    if (k < 0) k += axis_len;
    out[i] = (k >= 0 && k < axis_len)
                 ? data[(o * static_cast<uint32_t>(axis_len) + static_cast<uint32_t>(k)) *
                            inner.divisor +
                        in]
                 : E{};
  }
}

struct alignas(16) Unit16 {
  uint4 v;
};

template <typename E, typename I>
__global__ void gather_elements_kernel(const E* __restrict__ data, const I* __restrict__ idx,
                                       E* __restrict__ out, ElementsIndex ix) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < ix.numel;
       i += stride) {
    int64_t k = static_cast<int64_t>(idx[i]);
    if (k < 0) k += ix.axis_len;
    if (k < 0 || k >= ix.axis_len) {
      out[i] = E(0);
      continue;
    }
    int64_t r = i, off = 0;
    for (int d = ix.rank - 1; d >= 0; --d) {
      const int64_t q = r / ix.dims[d];
      const int64_t c = r - q * ix.dims[d];
      off += (d == ix.axis ? k : c) * ix.data_strides[d];
      r = q;
    }
    out[i] = data[off];
  }
}

template <typename F>
void visit_index(DType t, F&& f) {
  if (t == DType::kInt32) return f(TypeTag<int32_t>{});
  if (t == DType::kInt64) return f(TypeTag<int64_t>{});
  XRT_THROW(UnsupportedOperationError, "Gather (cuda): indices must be int32 or int64, got ",
            dtype_name(t));
}

}  // namespace

void launch_gather(std::size_t elem, int64_t outer, int64_t axis_len, int64_t count, int64_t inner,
                   const void* data, DType index_dtype, const void* indices, void* out,
                   void* stream) {
  const int64_t n = outer * count * inner;
  if (n <= 0) return;
  constexpr int64_t kLimit = int64_t{1} << 31;
  if (n < kLimit && outer * axis_len * inner < kLimit) {
    // Widest unit that divides the inner run and both pointers' alignment.
    std::size_t unit = elem;
    for (std::size_t u = 16; u > elem; u /= 2)
      if ((inner * static_cast<int64_t>(elem)) % static_cast<int64_t>(u) == 0 &&
          reinterpret_cast<uintptr_t>(data) % u == 0 && reinterpret_cast<uintptr_t>(out) % u == 0) {
        unit = u;
        break;
      }
    const int64_t inner_u = inner * static_cast<int64_t>(elem) / static_cast<int64_t>(unit);
    const int64_t n_u = outer * count * inner_u;
    auto go = [&](auto et) {
      using E = typename decltype(et)::type;
      visit_index(index_dtype, [&](auto it) {
        using I = typename decltype(it)::type;
        gather32_kernel<E, I><<<grid_for(n_u, 256), 256, 0, as_stream(stream)>>>(
            static_cast<const E*>(data), static_cast<const I*>(indices), static_cast<E*>(out),
            static_cast<uint32_t>(n_u), static_cast<int32_t>(axis_len),
            make_fast_divisor(static_cast<uint32_t>(count)),
            make_fast_divisor(static_cast<uint32_t>(inner_u)));
        XRT_CUDA_LAUNCH_CHECK();
      });
    };
    if (unit == 16) return go(TypeTag<Unit16>{});
    return visit_elem_size(unit, "Gather", go);
  }
  visit_elem_size(elem, "Gather", [&](auto et) {
    using E = typename decltype(et)::type;
    visit_index(index_dtype, [&](auto it) {
      using I = typename decltype(it)::type;
      gather_kernel<E, I><<<grid_for(n, 256), 256, 0, as_stream(stream)>>>(
          static_cast<const E*>(data), static_cast<const I*>(indices), static_cast<E*>(out), outer,
          axis_len, count, inner);
      XRT_CUDA_LAUNCH_CHECK();
    });
  });
}

void launch_gather_elements(std::size_t elem, const ElementsIndex& ix, const void* data,
                            DType index_dtype, const void* indices, void* out, void* stream) {
  if (ix.numel <= 0) return;
  visit_elem_size(elem, "GatherElements", [&](auto et) {
    using E = typename decltype(et)::type;
    visit_index(index_dtype, [&](auto it) {
      using I = typename decltype(it)::type;
      gather_elements_kernel<E, I><<<grid_for(ix.numel, 256), 256, 0, as_stream(stream)>>>(
          static_cast<const E*>(data), static_cast<const I*>(indices), static_cast<E*>(out), ix);
      XRT_CUDA_LAUNCH_CHECK();
    });
  });
}

}  // namespace xpuruntime::cuda_ops
