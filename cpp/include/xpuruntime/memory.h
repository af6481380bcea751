// MemoryManager: one caching allocator per device (seed 001 §2.2, DESIGN.md §7).
// Blocks are rounded to size classes and cached per stream: a block freed on
// stream S is reused at once by S, and by other streams only after the events
// recorded for its cross-stream uses (record_stream) have completed. Over the
// limit (or the device) the cache is emptied and the allocation retried once;
// then OutOfMemoryError carries the statistics, and the allocator stays usable.
// All methods are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "xpuruntime/backend.h"
#include "xpuruntime/device.h"

namespace xpuruntime {

template <typename T>
class NoDestructor;

struct MemoryStats {
  std::size_t allocated_bytes = 0;       // in live blocks (rounded sizes)
  std::size_t requested_bytes = 0;       // as asked by callers
  std::size_t reserved_bytes = 0;        // obtained from the device (live + cached)
  std::size_t peak_allocated_bytes = 0;
  std::size_t peak_reserved_bytes = 0;
  std::uint64_t num_allocs = 0;
  std::uint64_t num_frees = 0;
  std::uint64_t num_cache_hits = 0;
  std::uint64_t num_cache_misses = 0;     // went to the device
  std::uint64_t num_device_allocs = 0;    // raw allocations made
  std::uint64_t num_device_frees = 0;
  std::uint64_t num_ooms = 0;
  std::size_t memory_limit = 0;           // 0: no limit
  std::string str() const;
};

// Rounds a request to its size class (512-byte minimum; 4 classes per power of two).
std::size_t round_size_class(std::size_t bytes);

class CachingAllocator {
 public:
  CachingAllocator(DeviceBackend& backend, Device device);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Returns device memory for use on `stream` (nullptr: the default stream).
  // Zero bytes gives a unique non-null pointer of a minimum block.
  void* allocate(std::size_t bytes, NativeStream stream = nullptr);
  // Returns a block to the cache. Unknown pointers throw InvalidArgumentError.
  void free(void* ptr);
  // Marks that `ptr` is also used on `stream`; its reuse waits for that work.
  void record_stream(void* ptr, NativeStream stream);
  // Releases every cached (unused) block back to the device.
  void empty_cache();
  MemoryStats stats() const;
  void reset_peak_stats();
  void set_memory_limit(std::size_t bytes);  // 0 removes the limit
  const Device& device() const { return device_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Device device_;
};

class MemoryManager {
 public:
  static MemoryManager& instance();
  // The caching allocator of a device (created on first use).
  CachingAllocator& allocator(const Device& d);
  MemoryStats stats(const Device& d) { return allocator(d).stats(); }
  void empty_cache(const Device& d) { allocator(d).empty_cache(); }
  void set_memory_limit(const Device& d, std::size_t bytes) { allocator(d).set_memory_limit(bytes); }
  // Page-locked host memory for fast, asynchronous host<->device copies.
  void* allocate_pinned(std::size_t bytes);
  // Frees a block allocate_pinned handed out; any other pointer (or one freed already)
  // is ignored here, and refused with InvalidArgumentError by free_pinned_checked.
  void free_pinned(void* ptr) noexcept;
  void free_pinned_checked(void* ptr);
  // false (and nothing freed) when ptr is not a live block of allocate_pinned.
  bool release_pinned(void* ptr) noexcept;

 private:
  template <typename>
  friend class NoDestructor;  // process-lifetime singleton
  MemoryManager() = default;
};

}  // namespace xpuruntime
