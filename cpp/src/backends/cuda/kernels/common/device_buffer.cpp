#include "backends/cuda/kernels/common/device_buffer.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kind.h"
#include "xpuruntime/memory.h"

namespace xpuruntime::cuda_ops {

DeviceBuffer::DeviceBuffer(const void *host, std::size_t bytes, int device)
    : alloc_(MemoryManager::instance().allocator(::xpuruntime::cuda::device(device))) {
  cuda::DeviceGuard guard(device);
  ptr_ = alloc_.allocate(std::max<std::size_t>(bytes, 1));
  try {
    if (bytes) XRT_CUDA_CHECK(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice));
  } catch (...) {
    alloc_.free(ptr_);
    throw;
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) alloc_.free(ptr_);
}

}  // namespace xpuruntime::cuda_ops
