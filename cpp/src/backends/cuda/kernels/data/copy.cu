// Byte-generic strided copy (one walk over collapsed dims, both sides strided) and
// the tiled batched transpose of the last two dimensions.
#include "backends/cuda/kernels/common/device_types.cuh"
#include "backends/cuda/kernels/data/data_impl.h"

namespace xpuruntime::cuda_ops {
namespace {

template <typename E>
__global__ void copy_kernel(const E* __restrict__ in, E* __restrict__ out, CopyIndex ix) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < ix.numel;
       i += stride) {
    int64_t r = i, io = ix.in_base, oo = ix.out_base;
    for (int d = ix.rank - 1; d >= 0; --d) {
      const int64_t q = r / ix.dims[d];
      const int64_t c = r - q * ix.dims[d];
      io += c * ix.in_strides[d];
      oo += c * ix.out_strides[d];
      r = q;
    }
    out[oo] = in[io];
  }
}

constexpr int kTile = 32;

template <typename E>
__global__ void transpose_tiled_kernel(const E* __restrict__ in, E* __restrict__ out, int64_t batch,
                                       int64_t rows, int64_t cols) {
  __shared__ E tile[kTile][kTile + 1];  // +1: no bank conflicts on the transposed read
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile,
                c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    const E* ib = in + b * rows * cols;
    E* ob = out + b * rows * cols;
    for (int y = threadIdx.y; y < kTile; y += blockDim.y) {
      const int64_t r = r0 + y, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[y][threadIdx.x] = ib[r * cols + c];
    }
    __syncthreads();
    for (int y = threadIdx.y; y < kTile; y += blockDim.y) {
      const int64_t c = c0 + y, r = r0 + threadIdx.x;
      if (c < cols && r < rows) ob[c * rows + r] = tile[threadIdx.x][y];
    }
    __syncthreads();
  }
}

}  // namespace

void launch_copy(std::size_t elem, const CopyIndex& ix, const void* in, void* out, void* stream) {
  if (ix.numel <= 0) return;
  visit_elem_size(elem, "copy", [&](auto tag) {
    using E = typename decltype(tag)::type;
    copy_kernel<E><<<grid_for(ix.numel, 256), 256, 0, as_stream(stream)>>>(
        static_cast<const E*>(in), static_cast<E*>(out), ix);
    XRT_CUDA_LAUNCH_CHECK();
  });
}

void launch_transpose_tiled(std::size_t elem, int64_t batch, int64_t rows, int64_t cols,
                            const void* in, void* out, void* stream) {
  if (batch * rows * cols <= 0) return;
  XRT_CHECK((cols + kTile - 1) / kTile < (int64_t{1} << 31) && (rows + kTile - 1) / kTile < 65536,
            InvalidArgumentError, "Transpose: ", rows, " x ", cols,
            " is too large for the tiled kernel");
  visit_elem_size(elem, "Transpose", [&](auto tag) {
    using E = typename decltype(tag)::type;
    const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile),
                    static_cast<unsigned>((rows + kTile - 1) / kTile),
                    static_cast<unsigned>(batch < 65535 ? batch : 65535));
    transpose_tiled_kernel<E><<<grid, dim3(kTile, 8), 0, as_stream(stream)>>>(
        static_cast<const E*>(in), static_cast<E*>(out), batch, rows, cols);
    XRT_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace xpuruntime::cuda_ops
