#include <map>
#include <memory>
#include <mutex>

#include "core/no_destructor.h"
#include "xpuruntime/checked.h"
#include "xpuruntime/device.h"
#include "xpuruntime/error.h"
#include "xpuruntime/memory.h"

namespace xpuruntime {
namespace {
struct Allocators {
  std::mutex mu;
  std::map<std::pair<int, int>, std::unique_ptr<CachingAllocator>> by_device;
};
Allocators& allocators() {
  static NoDestructor<Allocators> a;  // tensors may outlive static destruction
  return a.get();
}
}  // namespace

MemoryManager& MemoryManager::instance() {
  static NoDestructor<MemoryManager> m;
  return m.get();
}

CachingAllocator& MemoryManager::allocator(const Device& d) {
  auto& a = allocators();
  std::lock_guard<std::mutex> lock(a.mu);
  auto key = std::make_pair(static_cast<int>(d.type), d.index);
  auto it = a.by_device.find(key);
  if (it != a.by_device.end()) return *it->second;
  DeviceManager::instance().check_device(d);
  auto& backend = DeviceManager::instance().backend(d.type);
  auto alloc = std::make_unique<CachingAllocator>(backend, d);
  return *a.by_device.emplace(key, std::move(alloc)).first->second;
}

void* MemoryManager::allocate_pinned(std::size_t bytes) {
  // Backends round the size up to their alignment; past the cap that would wrap.
  XRT_CHECK(bytes <= kMaxAllocationBytes, OutOfMemoryError, "could not allocate ", bytes,
            " bytes of pinned host memory: more than any machine holds (at most ",
            kMaxAllocationBytes, " bytes)");
  DeviceManager& dm = DeviceManager::instance();
  DeviceBackend* cuda = dm.backend_or_null(DeviceType::kCUDA);
  void* p = cuda ? cuda->host_alloc(bytes) : dm.backend(DeviceType::kCPU).host_alloc(bytes);
  XRT_CHECK(p != nullptr, OutOfMemoryError, "could not allocate ", bytes, " bytes of pinned host memory");
  return p;
}

void MemoryManager::free_pinned(void* ptr) noexcept {
  if (!ptr) return;
  DeviceManager& dm = DeviceManager::instance();
  DeviceBackend* cuda = dm.backend_or_null(DeviceType::kCUDA);
  if (cuda) cuda->host_free(ptr);
  else dm.backend(DeviceType::kCPU).host_free(ptr);
}

}  // namespace xpuruntime
