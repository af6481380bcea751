// Our caching allocator behind torch.cuda.memory.CUDAPluggableAllocator
// (xpuruntime.pytorch.set_allocator): torch calls these two C functions of
// libxpuruntime_cuda.so for every CUDA allocation, so its tensors come out of the
// core's per-device CachingAllocator (stream-aware reuse, our statistics, our
// memory limit). They never throw into torch: a failed allocation returns null,
// which torch reports as its own out-of-memory error.
#include <cstddef>
#include <cstdio>
#include <exception>

#include "backends/cuda/cuda_kind.h"
#include "xpuruntime/device.h"
#include "xpuruntime/memory.h"

extern "C" void* xrt_torch_malloc(std::ptrdiff_t size, int device, void* stream) {
  try {
    auto& alloc = xpuruntime::MemoryManager::instance().allocator(::xpuruntime::cuda::device(device));
    return alloc.allocate(static_cast<std::size_t>(size), stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xpuruntime allocator: %zd bytes on cuda:%d failed: %s\n",
                 static_cast<std::ptrdiff_t>(size), device, e.what());
    return nullptr;
  }
}

extern "C" void xrt_torch_free(void* ptr, std::ptrdiff_t /*size*/, int device, void* /*stream*/) {
  if (ptr == nullptr) return;
  try {
    xpuruntime::MemoryManager::instance().allocator(::xpuruntime::cuda::device(device)).free(ptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xpuruntime allocator: free of %p on cuda:%d failed: %s\n", ptr, device,
                 e.what());
  }
}
