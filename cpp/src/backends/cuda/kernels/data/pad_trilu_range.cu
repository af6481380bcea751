// Pad (constant / reflect / edge / wrap, negative pads crop), Trilu and Range.
#include "backends/cuda/kernels/common/device_types.cuh"
#include "backends/cuda/kernels/data/data_impl.h"

namespace xpuruntime::cuda_ops {
namespace {

template <typename E>
__global__ void pad_kernel(const E* __restrict__ in, E* __restrict__ out, PadIndex ix, PadMode mode,
                           const E* value, uint64_t value_bits) {
  const E fill = value != nullptr ? *value : static_cast<E>(value_bits);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < ix.numel;
       i += stride) {
    int64_t r = i, off = 0, in_stride = 1;
    bool outside = false;
    for (int d = ix.rank - 1; d >= 0; --d) {
      const int64_t q = r / ix.out_dims[d];
      int64_t c = r - q * ix.out_dims[d] - ix.begin[d];
      r = q;
      const int64_t n = ix.in_dims[d];
      if (c < 0 || c >= n) {
        switch (mode) {
          case PadMode::kConstant:
            outside = true;
            break;
          case PadMode::kEdge:
            c = c < 0 ? 0 : n - 1;
            break;
          case PadMode::kWrap:
            c = ((c % n) + n) % n;
            break;
          case PadMode::kReflect: {
            // Mirror without repeating the edge: period 2(n-1) (n == 1 maps to 0).
            const int64_t p = 2 * (n - 1);
            if (p == 0) {
              c = 0;
            } else {
              c = ((c % p) + p) % p;
              if (c >= n) c = p - c;
            }
            break;
          }
        }
      }
      off += c * in_stride;
      in_stride *= n;
    }
    out[i] = outside ? fill : in[off];
  }
}

template <typename E>
__global__ void trilu_kernel(const E* __restrict__ in, E* __restrict__ out, int64_t n, int64_t rows,
                             int64_t cols, int64_t k, bool upper) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t j = i % cols;
    const int64_t r = (i / cols) % rows;
    const bool keep = upper ? (j - r >= k) : (j - r <= k);
    out[i] = keep ? in[i] : E(0);
  }
}

template <typename E>
__global__ void fill_kernel(E* __restrict__ out, int64_t n, uint64_t bits) {
  const E v = static_cast<E>(bits);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = v;
}

struct SmallInts {
  int64_t v[kMaxCopyRank];
  int32_t n;
};

__global__ void write_ints_kernel(SmallInts ints, int64_t* out) {
  if (static_cast<int>(threadIdx.x) < ints.n) out[threadIdx.x] = ints.v[threadIdx.x];
}

template <typename T>
__global__ void range_kernel(const T* start, const T* delta, T* out, int64_t n) {
  using C = std::conditional_t<is_float_v<T>, double, int64_t>;
  const C s = static_cast<C>(load(*start)), d = static_cast<C>(load(*delta));
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = store<T>(s + static_cast<C>(i) * d);
}

}  // namespace

void launch_pad(std::size_t elem, const PadIndex& ix, PadMode mode, const void* in,
                const void* value, uint64_t value_bits, void* out, void* stream) {
  if (ix.numel <= 0) return;
  visit_elem_size(elem, "Pad", [&](auto et) {
    using E = typename decltype(et)::type;
    pad_kernel<E><<<grid_for(ix.numel, 256), 256, 0, as_stream(stream)>>>(
        static_cast<const E*>(in), static_cast<E*>(out), ix, mode, static_cast<const E*>(value),
        value_bits);
    XRT_CUDA_LAUNCH_CHECK();
  });
}

void launch_trilu(std::size_t elem, int64_t batch, int64_t rows, int64_t cols, int64_t k,
                  bool upper, const void* in, void* out, void* stream) {
  const int64_t n = batch * rows * cols;
  if (n <= 0) return;
  visit_elem_size(elem, "Trilu", [&](auto et) {
    using E = typename decltype(et)::type;
    trilu_kernel<E><<<grid_for(n, 256), 256, 0, as_stream(stream)>>>(
        static_cast<const E*>(in), static_cast<E*>(out), n, rows, cols, k, upper);
    XRT_CUDA_LAUNCH_CHECK();
  });
}

void launch_fill(std::size_t elem, int64_t n, uint64_t value_bits, void* out, void* stream) {
  if (n <= 0) return;
  visit_elem_size(elem, "fill", [&](auto et) {
    using E = typename decltype(et)::type;
    fill_kernel<E>
        <<<grid_for(n, 256), 256, 0, as_stream(stream)>>>(static_cast<E*>(out), n, value_bits);
    XRT_CUDA_LAUNCH_CHECK();
  });
}

void launch_write_ints(const int64_t* values, int n, void* out, void* stream) {
  if (n <= 0) return;
  XRT_CHECK(n <= kMaxCopyRank, InvalidArgumentError, "launch_write_ints: ", n, " values (at most ",
            kMaxCopyRank, ")");
  SmallInts ints{};
  for (int i = 0; i < n; ++i) ints.v[i] = values[i];
  ints.n = n;
  write_ints_kernel<<<1, 32, 0, as_stream(stream)>>>(ints, static_cast<int64_t*>(out));
  XRT_CUDA_LAUNCH_CHECK();
}

void launch_range(DType t, const void* start, const void* delta, void* out, int64_t n,
                  void* stream) {
  if (n <= 0) return;
  visit_dtype<TypeSet::kSigned>(t, "Range", [&](auto tag) {
    using T = typename decltype(tag)::type;
    range_kernel<T><<<grid_for(n, 256), 256, 0, as_stream(stream)>>>(
        static_cast<const T*>(start), static_cast<const T*>(delta), static_cast<T*>(out), n);
    XRT_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace xpuruntime::cuda_ops
