// Bytes a prepared kernel keeps on the device for its lifetime (weights in the
// layout its kernel reads), taken from the device's caching allocator so that
// xpuruntime.memory's statistics and memory limit account for them.
#pragma once

#include <cstddef>

namespace xpuruntime {
class CachingAllocator;
}

namespace xpuruntime::cuda_ops {

class DeviceBuffer {
 public:
  // Uploads `bytes` from host memory (synchronously) to device `device`.
  DeviceBuffer(const void *host, std::size_t bytes, int device);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  const void *data() const { return ptr_; }

 private:
  CachingAllocator &alloc_;
  void *ptr_ = nullptr;
};

}  // namespace xpuruntime::cuda_ops
