// Strided element copy within one CUDA device (Tensor::copy_from with a
// non-contiguous side), reached through plugin_lookup("cuda", "strided_copy").
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "backends/cuda/cuda_entries.h"
#include "backends/cuda/kernel_entry.h"
#include "xpuruntime/error.h"

namespace {

constexpr int kMaxDims = 8;

struct StridedArgs {
  int ndim;
  int64_t shape[kMaxDims];
  int64_t dst_strides[kMaxDims];
  int64_t src_strides[kMaxDims];
};

template <typename T>
__global__ void strided_copy_kernel(T* __restrict__ dst, const T* __restrict__ src, int64_t n,
                                    StridedArgs a) {
  for (int64_t linear = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; linear < n;
       linear += int64_t(gridDim.x) * blockDim.x) {
    int64_t rem = linear, doff = 0, soff = 0;
    for (int d = a.ndim - 1; d >= 0; --d) {
      int64_t i = rem % a.shape[d];
      rem /= a.shape[d];
      doff += i * a.dst_strides[d];
      soff += i * a.src_strides[d];
    }
    dst[doff] = src[soff];
  }
}

template <typename T>
void launch(void* dst, const void* src, int64_t n, const StridedArgs& a, cudaStream_t s) {
  int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 65535 * 8) blocks = 65535 * 8;
  strided_copy_kernel<T><<<static_cast<unsigned>(blocks), threads, 0, s>>>(
      static_cast<T*>(dst), static_cast<const T*>(src), n, a);
}

}  // namespace

namespace xpuruntime::cuda {
namespace {

void strided_copy(void* dst, const void* src, int ndim, const int64_t* shape,
                  const int64_t* dst_strides, const int64_t* src_strides, int elem_size,
                  void* stream) {
  XRT_CHECK(ndim <= kMaxDims, UnsupportedOperationError, "strided CUDA copy supports up to ",
            kMaxDims, " dimensions, got ", ndim, "; make the tensor contiguous first");
  StridedArgs a{};
  a.ndim = ndim;
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) {
    a.shape[d] = shape[d];
    a.dst_strides[d] = dst_strides[d];
    a.src_strides[d] = src_strides[d];
    n *= shape[d];
  }
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  switch (elem_size) {
    case 1: launch<uint8_t>(dst, src, n, a, s); break;
    case 2: launch<uint16_t>(dst, src, n, a, s); break;
    case 4: launch<uint32_t>(dst, src, n, a, s); break;
    case 8: launch<uint64_t>(dst, src, n, a, s); break;
    default: XRT_THROW(InvalidArgumentError, "unsupported element size ", elem_size);
  }
  cudaError_t err = cudaGetLastError();
  XRT_CHECK(err == cudaSuccess, CudaError, "strided copy kernel launch failed: ",
            cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
}

}  // namespace

cuda_kernels::KernelStatus strided_copy_entry(void* dst, const void* src, int32_t ndim,
                                              const int64_t* shape, const int64_t* dst_strides,
                                              const int64_t* src_strides, int32_t elem_size,
                                              void* stream, char* err, std::size_t err_len) noexcept {
  return cuda_kernels::guarded(
      [&] { strided_copy(dst, src, ndim, shape, dst_strides, src_strides, elem_size, stream); }, err,
      err_len);
}

}  // namespace xpuruntime::cuda
