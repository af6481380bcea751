// The caching allocator behind MemoryManager (see memory.h for the contract).
// Free blocks are kept per stream in a size-ordered multimap; a request takes the
// smallest cached block of its stream that is at least its size class and at most
// 25% larger, else asks the backend. Cross-stream uses recorded with record_stream
// delay a freed block's return to the cache until their events complete.
#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "xpuruntime/checked.h"
#include "xpuruntime/error.h"
#include "xpuruntime/memory.h"
#include "xpuruntime/profiler.h"

namespace xpuruntime {

namespace {
constexpr std::size_t kMinBlock = 512;
constexpr std::size_t kLargeThreshold = 16u << 20;  // above: 2 MiB granularity
constexpr std::size_t kLargeGranule = 2u << 20;

std::string human_bytes(std::size_t b) {
  char buf[64];
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}
}  // namespace

std::size_t round_size_class(std::size_t bytes) {
  // Past the cap, rounding up would wrap to a tiny class (2**64-1 -> 0).
  XRT_CHECK(bytes <= kMaxAllocationBytes, OutOfMemoryError, "cannot allocate ", bytes,
            " bytes: more than any device holds (the most one block may be is ",
            kMaxAllocationBytes, " bytes)");
  if (bytes <= kMinBlock) return kMinBlock;
  if (bytes > kLargeThreshold) return (bytes + kLargeGranule - 1) / kLargeGranule * kLargeGranule;
  // Four classes per power of two: 2^k * {1, 1.25, 1.5, 1.75}.
  std::size_t pow2 = std::size_t{1} << (63 - __builtin_clzll(bytes));
  std::size_t step = pow2 / 4;
  return (bytes + step - 1) / step * step;
}

std::string MemoryStats::str() const {
  std::string s = "allocated " + human_bytes(allocated_bytes) + ", reserved " +
                  human_bytes(reserved_bytes) + ", peak allocated " +
                  human_bytes(peak_allocated_bytes) + ", limit " +
                  (memory_limit ? human_bytes(memory_limit) : std::string("none")) + ", " +
                  std::to_string(num_allocs) + " allocations (" + std::to_string(num_cache_hits) +
                  " cache hits), " + std::to_string(num_device_allocs) + " device allocations";
  return s;
}

struct CachingAllocator::Impl {
  struct Block {
    std::size_t size = 0;       // size class actually reserved
    std::size_t requested = 0;
    NativeStream stream = nullptr;
    std::vector<NativeStream> other_streams;
  };
  struct Pending {
    void* ptr;
    Block block;
    std::vector<NativeEvent> events;
  };

  DeviceBackend& backend;
  Device device;
  std::mutex mu;
  std::unordered_map<void*, Block> live;
  // Cached blocks: stream -> (size -> ptr).
  std::map<NativeStream, std::multimap<std::size_t, void*>> cached;
  std::unordered_map<void*, std::size_t> cached_size;  // for empty_cache accounting
  std::vector<Pending> pending;
  MemoryStats stats;

  Impl(DeviceBackend& b, Device d) : backend(b), device(d) {}

  // Takes a cached block of at least `cls` bytes (at most 25% more); sets *size to
  // the block's real size, which is what it keeps reserving while live.
  void* take_cached(NativeStream stream, std::size_t cls, std::size_t* size) {
    auto it = cached.find(stream);
    if (it == cached.end()) return nullptr;
    auto& pool = it->second;
    auto hit = pool.lower_bound(cls);
    if (hit == pool.end() || hit->first > cls + cls / 4) return nullptr;
    void* p = hit->second;
    *size = hit->first;
    pool.erase(hit);
    cached_size.erase(p);
    return p;
  }

  void put_cached(void* p, const Block& b) {
    cached[b.stream].emplace(b.size, p);
    cached_size.emplace(p, b.size);
  }

  // Moves pending blocks whose cross-stream work finished into the cache.
  void process_pending(bool wait) {
    auto& ops = backend.streams();
    for (auto it = pending.begin(); it != pending.end();) {
      bool done = true;
      for (NativeEvent e : it->events) {
        if (wait) ops.synchronize_event(device.index, e);
        else if (!ops.query_event(device.index, e)) done = false;
      }
      if (!done) {
        ++it;
        continue;
      }
      for (NativeEvent e : it->events) ops.destroy_event(device.index, e);
      put_cached(it->ptr, it->block);
      it = pending.erase(it);
    }
  }

  void release_cached() {
    process_pending(/*wait=*/true);
    for (auto& [stream, pool] : cached) {
      for (auto& [size, p] : pool) {
        backend.raw_free(device.index, p);
        stats.reserved_bytes -= size;
        ++stats.num_device_frees;
      }
    }
    cached.clear();
    cached_size.clear();
  }

  [[noreturn]] void throw_oom(std::size_t requested, std::size_t cls, const char* why) {
    ++stats.num_ooms;
    XRT_THROW(OutOfMemoryError, "out of memory on ", device.str(), ": tried to allocate ",
              human_bytes(requested), " (block ", human_bytes(cls), ") and ", why, "; ",
              stats.str(),
              ". Free tensors you no longer need, lower the batch size, or raise the limit "
              "with set_memory_limit()");
  }
};

CachingAllocator::CachingAllocator(DeviceBackend& backend, Device device)
    : impl_(std::make_unique<Impl>(backend, device)), device_(device) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->release_cached();
}

void* CachingAllocator::allocate(std::size_t bytes, NativeStream stream) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  if (bytes > kMaxAllocationBytes) m.throw_oom(bytes, bytes, "no device holds that much");
  std::size_t cls = round_size_class(bytes);
  if (!m.pending.empty()) m.process_pending(/*wait=*/false);
  void* p = m.take_cached(stream, cls, &cls);
  bool hit = p != nullptr;
  if (hit) {
    ++m.stats.num_cache_hits;
  } else {
    ++m.stats.num_cache_misses;
    auto over_limit = [&] {
      return m.stats.memory_limit && m.stats.reserved_bytes + cls > m.stats.memory_limit;
    };
    if (over_limit()) m.release_cached();
    if (over_limit()) m.throw_oom(bytes, cls, "the memory limit would be exceeded");
    p = m.backend.raw_alloc(device_.index, cls);
    if (!p) {  // the device is full: give back what we cache and try once more
      m.release_cached();
      p = m.backend.raw_alloc(device_.index, cls);
      if (!p) m.throw_oom(bytes, cls, "the device has no memory left");
    }
    m.stats.reserved_bytes += cls;
    ++m.stats.num_device_allocs;
    m.stats.peak_reserved_bytes = std::max(m.stats.peak_reserved_bytes, m.stats.reserved_bytes);
  }
  m.live.emplace(p, Impl::Block{cls, bytes, stream, {}});
  ++m.stats.num_allocs;
  m.stats.allocated_bytes += cls;
  m.stats.requested_bytes += bytes;
  m.stats.peak_allocated_bytes = std::max(m.stats.peak_allocated_bytes, m.stats.allocated_bytes);
  if (Profiler::instance().enabled()) Profiler::instance().record_alloc(cls, hit);
  return p;
}

void CachingAllocator::free(void* ptr) {
  if (!ptr) return;
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  auto it = m.live.find(ptr);
  XRT_CHECK(it != m.live.end(), InvalidArgumentError, "free of a pointer that ",
            device_.str(), "'s allocator did not hand out (double free?)");
  Impl::Block block = std::move(it->second);
  m.live.erase(it);
  ++m.stats.num_frees;
  m.stats.allocated_bytes -= block.size;
  m.stats.requested_bytes -= block.requested;
  if (Profiler::instance().enabled()) Profiler::instance().record_free(block.size);
  if (block.other_streams.empty()) {
    m.put_cached(ptr, block);
    return;
  }
  // Work queued on other streams may still read this block: reuse waits for it.
  auto& ops = m.backend.streams();
  std::vector<NativeEvent> events;
  for (NativeStream s : block.other_streams) {
    NativeEvent e = ops.create_event(device_.index, /*enable_timing=*/false);
    ops.record_event(device_.index, e, s);
    events.push_back(e);
  }
  block.other_streams.clear();
  m.pending.push_back({ptr, std::move(block), std::move(events)});
}

void CachingAllocator::record_stream(void* ptr, NativeStream stream) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  auto it = m.live.find(ptr);
  XRT_CHECK(it != m.live.end(), InvalidArgumentError,
            "record_stream on a pointer this allocator does not own");
  auto& b = it->second;
  if (stream != b.stream &&
      std::find(b.other_streams.begin(), b.other_streams.end(), stream) == b.other_streams.end())
    b.other_streams.push_back(stream);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->release_cached();
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stats.peak_allocated_bytes = impl_->stats.allocated_bytes;
  impl_->stats.peak_reserved_bytes = impl_->stats.reserved_bytes;
}

void CachingAllocator::set_memory_limit(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stats.memory_limit = bytes;
  if (bytes && impl_->stats.reserved_bytes > bytes) impl_->release_cached();
}

}  // namespace xpuruntime
