// Caching allocator: size classes, reuse, statistics, the limit and OOM recovery.
#include <gtest/gtest.h>

#include "xpuruntime/error.h"
#include "xpuruntime/memory.h"
#include "xpuruntime/stream.h"

namespace xpuruntime {
namespace {

CachingAllocator make_cpu_allocator() {
  return CachingAllocator(DeviceManager::instance().backend(DeviceKind::cpu()), Device::cpu());
}

TEST(SizeClass, RoundsUpWithinAQuarterPowerOfTwo) {
  EXPECT_EQ(round_size_class(0), 512u);
  EXPECT_EQ(round_size_class(1), 512u);
  EXPECT_EQ(round_size_class(512), 512u);
  EXPECT_EQ(round_size_class(513), 640u);  // 512 + 128
  EXPECT_EQ(round_size_class(1000), 1024u);
  EXPECT_EQ(round_size_class(1025), 1280u);
  for (std::size_t b : {777u, 4097u, 100000u, 3000000u, 16000000u}) {
    std::size_t c = round_size_class(b);
    EXPECT_GE(c, b);
    EXPECT_LE(c, b + b / 4 + 512);
  }
  EXPECT_EQ(round_size_class((16u << 20) + 1) % (2u << 20), 0u);  // large: 2 MiB granules
}

TEST(CachingAllocator, ReusesFreedBlockOfTheSameClassAndCounts) {
  auto a = make_cpu_allocator();
  void* p = a.allocate(1000);
  ASSERT_NE(p, nullptr);
  a.free(p);
  void* q = a.allocate(900);  // same class (1024): the cached block comes back
  EXPECT_EQ(p, q);
  MemoryStats s = a.stats();
  EXPECT_EQ(s.num_allocs, 2u);
  EXPECT_EQ(s.num_cache_hits, 1u);
  EXPECT_EQ(s.num_device_allocs, 1u);
  EXPECT_EQ(s.allocated_bytes, 1024u);
  EXPECT_EQ(s.requested_bytes, 900u);
  EXPECT_EQ(s.reserved_bytes, 1024u);
  a.free(q);
  EXPECT_EQ(a.stats().allocated_bytes, 0u);
  EXPECT_EQ(a.stats().peak_allocated_bytes, 1024u);
}

TEST(CachingAllocator, DifferentStreamsDoNotShareCachedBlocks) {
  auto a = make_cpu_allocator();
  auto& ops = DeviceManager::instance().backend(DeviceKind::cpu()).streams();
  NativeStream s1 = ops.create_stream(0, 0), s2 = ops.create_stream(0, 0);
  void* p = a.allocate(4096, s1);
  a.free(p);
  void* q = a.allocate(4096, s2);
  EXPECT_NE(p, q);  // p is cached for s1 only
  void* r = a.allocate(4096, s1);
  EXPECT_EQ(p, r);
  a.free(q);
  a.free(r);
}

TEST(CachingAllocator, RecordStreamDefersReuseUntilEventsComplete) {
  auto a = make_cpu_allocator();
  auto& ops = DeviceManager::instance().backend(DeviceKind::cpu()).streams();
  NativeStream s1 = ops.create_stream(0, 0), s2 = ops.create_stream(0, 0);
  void* p = a.allocate(2048, s1);
  a.record_stream(p, s2);
  a.free(p);  // CPU events complete at once: the block returns on the next allocate
  void* q = a.allocate(2048, s1);
  EXPECT_EQ(p, q);
  a.free(q);
}

TEST(CachingAllocator, LimitRaisesOutOfMemoryWithStatsAndStaysUsable) {
  auto a = make_cpu_allocator();
  a.set_memory_limit(1 << 20);
  void* p = a.allocate(600 << 10);
  try {
    a.allocate(600 << 10);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("memory limit"), std::string::npos) << msg;
    EXPECT_NE(msg.find("allocated"), std::string::npos) << msg;
    EXPECT_NE(msg.find("limit 1.00 MiB"), std::string::npos) << msg;
  }
  EXPECT_EQ(a.stats().num_ooms, 1u);
  a.free(p);
  void* q = a.allocate(600 << 10);  // usable again after freeing
  EXPECT_NE(q, nullptr);
  a.free(q);
}

TEST(CachingAllocator, LimitEvictsCachedBlocksBeforeFailing) {
  auto a = make_cpu_allocator();
  a.set_memory_limit(1 << 20);
  void* p = a.allocate(700 << 10);
  a.free(p);  // cached, still reserved
  void* q = a.allocate(800 << 10);  // a different class: the cache is emptied to fit
  EXPECT_NE(q, nullptr);
  EXPECT_LE(a.stats().reserved_bytes, std::size_t{1} << 20);
  a.free(q);
}

TEST(CachingAllocator, EmptyCacheReleasesUnusedBlocks) {
  auto a = make_cpu_allocator();
  void* p = a.allocate(10000);
  void* q = a.allocate(20000);
  a.free(p);
  a.empty_cache();
  MemoryStats s = a.stats();
  EXPECT_EQ(s.reserved_bytes, round_size_class(20000));
  EXPECT_EQ(s.num_device_frees, 1u);
  a.free(q);
}

TEST(CachingAllocator, FreeOfUnknownPointerIsATypedError) {
  auto a = make_cpu_allocator();
  int x = 0;
  EXPECT_THROW(a.free(&x), InvalidArgumentError);
  void* p = a.allocate(64);
  a.free(p);
  EXPECT_THROW(a.free(p), InvalidArgumentError);  // double free
}

TEST(MemoryManager, PinnedMemoryWithoutCudaIsHostMemory) {
  void* p = MemoryManager::instance().allocate_pinned(1 << 16);
  ASSERT_NE(p, nullptr);
  static_cast<char*>(p)[0] = 1;
  MemoryManager::instance().free_pinned(p);
}

}  // namespace
}  // namespace xpuruntime

namespace xpuruntime {
namespace {
TEST(CachingAllocator, ReusedLargerBlockKeepsItsRealSizeInTheStatistics) {
  auto a = CachingAllocator(DeviceManager::instance().backend(DeviceKind::cpu()), Device::cpu());
  void* big = a.allocate(20u << 20);  // 20 MiB class
  a.free(big);
  void* smaller = a.allocate((20u << 20) - (1u << 20));  // a smaller class, same block reused
  EXPECT_EQ(smaller, big);
  EXPECT_EQ(a.stats().allocated_bytes, round_size_class(20u << 20));
  a.free(smaller);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes, 0u);
  EXPECT_EQ(a.stats().allocated_bytes, 0u);
}
}  // namespace
}  // namespace xpuruntime
