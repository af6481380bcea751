#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

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
// Pinned blocks handed out and not yet freed, with the backend that allocated each:
// free_pinned takes only these, and frees each with its own backend (a device plugin
// may load after a block came from the CPU backend).
struct PinnedBlocks {
  std::mutex mu;
  std::unordered_map<void*, DeviceBackend*> live;
};
PinnedBlocks& pinned_blocks() {
  static NoDestructor<PinnedBlocks> p;
  return p.get();
}
// Pinned host memory comes from the first backend in the plugin table's order that
// has a device and says its host memory is page-locked; else from the CPU's.
DeviceBackend& pinned_host_backend() {
  DeviceManager& dm = DeviceManager::instance();
  for (DeviceKind kind : DeviceKind::all()) {
    if (kind.is_cpu()) continue;
    DeviceBackend* b = dm.backend_or_null(kind);
    if (b != nullptr && b->attribute(0, "host_memory") == "pinned") return *b;
  }
  return dm.backend(DeviceKind::cpu());
}
}  // namespace

MemoryManager& MemoryManager::instance() {
  static NoDestructor<MemoryManager> m;
  return m.get();
}

CachingAllocator& MemoryManager::allocator(const Device& d) {
  auto& a = allocators();
  std::lock_guard<std::mutex> lock(a.mu);
  auto key = std::make_pair(static_cast<int>(d.kind.id()), d.index);
  auto it = a.by_device.find(key);
  if (it != a.by_device.end()) return *it->second;
  DeviceManager::instance().check_device(d);
  auto& backend = DeviceManager::instance().backend(d.kind);
  auto alloc = std::make_unique<CachingAllocator>(backend, d);
  return *a.by_device.emplace(key, std::move(alloc)).first->second;
}

void* MemoryManager::allocate_pinned(std::size_t bytes) {
  // Backends round the size up to their alignment; past the cap that would wrap.
  XRT_CHECK(bytes <= kMaxAllocationBytes, OutOfMemoryError, "could not allocate ", bytes,
            " bytes of pinned host memory: more than any machine holds (at most ",
            kMaxAllocationBytes, " bytes)");
  DeviceBackend& backend = pinned_host_backend();
  void* p = backend.host_alloc(bytes);
  XRT_CHECK(p != nullptr, OutOfMemoryError, "could not allocate ", bytes, " bytes of pinned host memory");
  auto& blocks = pinned_blocks();
  std::lock_guard<std::mutex> lock(blocks.mu);
  blocks.live.emplace(p, &backend);
  return p;
}

bool MemoryManager::release_pinned(void* ptr) noexcept {
  if (!ptr) return true;
  DeviceBackend* backend = nullptr;
  {
    auto& blocks = pinned_blocks();
    std::lock_guard<std::mutex> lock(blocks.mu);
    auto it = blocks.live.find(ptr);
    if (it == blocks.live.end()) return false;  // not ours, or freed already
    backend = it->second;
    blocks.live.erase(it);
  }
  backend->host_free(ptr);
  return true;
}

void MemoryManager::free_pinned(void* ptr) noexcept { (void)release_pinned(ptr); }

void MemoryManager::free_pinned_checked(void* ptr) {
  if (release_pinned(ptr)) return;
  char shown[32];
  std::snprintf(shown, sizeof(shown), "%#zx", static_cast<std::size_t>(reinterpret_cast<uintptr_t>(ptr)));
  XRT_THROW(InvalidArgumentError, "free_pinned: ", shown,
            " is not a pinned block allocate_pinned handed out (or it was freed already); pass the "
            "exact pointer allocate_pinned returned, once");
}

}  // namespace xpuruntime
