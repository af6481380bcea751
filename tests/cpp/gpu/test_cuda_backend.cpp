// The CUDA device backend and the core's GPU paths on a real device: device info,
// raw memory, the caching allocator (reuse, cross-stream reuse, limit, OOM),
// copies, streams/events timing and CUDA graph capture/replay. Every test skips
// with the reason when this machine has no usable CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "xpuruntime/backend.h"
#include "xpuruntime/cuda_kernels_abi.h"
#include "xpuruntime/device.h"
#include "xpuruntime/error.h"
#include "xpuruntime/memory.h"
#include "xpuruntime/plugin.h"
#include "xpuruntime/profiler.h"
#include "xpuruntime/stream.h"

namespace xpuruntime {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Test kernels of the CUDA plugin (cpp/src/backends/cuda/testing_kernels.cu), reached
// through its lookup.
namespace ck = cuda_kernels;
using SpinFn = ck::TestSpinEntry;
using AxpyFn = ck::TestAxpyEntry;
using ErrorNameFn = ck::TestErrorNameEntry;

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DeviceManager& dm = DeviceManager::instance();
    if (dm.get_device_count() == 0) {
      GTEST_SKIP() << "no CUDA device: " << dm.accelerator_unavailable_reason();
    }
    backend_ = &dm.backend(DeviceKind::named("cuda"));
    spin_ = plugin_entry<SpinFn>("cuda", ck::entry::kTestSpin);
    axpy_ = plugin_entry<AxpyFn>("cuda", ck::entry::kTestAxpy);
    error_name_ = plugin_entry<ErrorNameFn>("cuda", ck::entry::kTestErrorName);
    ASSERT_NE(spin_, nullptr) << "plugin lookup has no " << ck::entry::kTestSpin;
    ASSERT_NE(axpy_, nullptr) << "plugin lookup has no " << ck::entry::kTestAxpy;
    ASSERT_NE(error_name_, nullptr);
  }

  void spin(double ms, const Stream& s) {
    int err = spin_(ms, s.native());
    ASSERT_EQ(err, 0) << error_name_(err);
  }
  void axpy(float a, const float* x, float* y, int64_t n, const Stream& s) {
    int err = axpy_(a, x, y, n, s.native());
    ASSERT_EQ(err, 0) << error_name_(err);
  }
  static std::vector<float> random_floats(std::size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
  }

  const Device dev_ = Device::parse("cuda:0");
  DeviceBackend* backend_ = nullptr;
  SpinFn spin_ = nullptr;
  AxpyFn axpy_ = nullptr;
  ErrorNameFn error_name_ = nullptr;
};

// ---- devices -----------------------------------------------------------------

TEST_F(CudaBackendTest, DeviceInfoIsComplete) {
  DeviceManager& dm = DeviceManager::instance();
  EXPECT_EQ(dm.accelerator_unavailable_reason(), "");
  DeviceInfo info = dm.get_device_info(0);
  EXPECT_EQ(info.device_id, 0);
  EXPECT_EQ(info.device_type, DeviceKind::named("cuda"));
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.total_memory, std::size_t{1} << 30);
  EXPECT_GT(info.free_memory, 0u);
  EXPECT_LE(info.free_memory, info.total_memory);
  EXPECT_GE(info.compute_capability_major, 5);
  EXPECT_GT(info.sm_count, 0);
  const int cc = info.compute_capability_major * 10 + info.compute_capability_minor;
  EXPECT_EQ(info.supports_bf16, cc >= 80);
  EXPECT_EQ(info.supports_fp16, cc >= 53);
  EXPECT_EQ(info.supports_int8, cc >= 61);
  const std::regex version(R"(\d+\.\d+)");
  EXPECT_TRUE(std::regex_match(info.driver_version, version)) << info.driver_version;
  EXPECT_TRUE(std::regex_match(info.runtime_version, version)) << info.runtime_version;
  const std::regex bus(R"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])");
  EXPECT_TRUE(std::regex_match(info.pci_bus_id, bus)) << info.pci_bus_id;

  auto all = dm.get_all_devices();
  ASSERT_EQ(static_cast<int>(all.size()), dm.get_device_count() + 1);
  EXPECT_EQ(all.front().name, info.name);
  EXPECT_EQ(all.back().device_type, DeviceKind::cpu());
}

TEST_F(CudaBackendTest, BadDeviceIndexIsATypedError) {
  const int n = backend_->device_count();
  EXPECT_THROW(backend_->device_info(n), InvalidArgumentError);
  EXPECT_THROW(backend_->device_info(-1), InvalidArgumentError);
  EXPECT_THROW(backend_->set_current(n), InvalidArgumentError);
  EXPECT_THROW(DeviceManager::instance().set_current_device(n), InvalidArgumentError);
  try {
    backend_->raw_alloc(n, 1024);
    FAIL() << "raw_alloc on a missing device did not throw";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
}

TEST_F(CudaBackendTest, CurrentDeviceIsPerThread) {
  DeviceManager& dm = DeviceManager::instance();
  dm.set_current_device(0);
  EXPECT_EQ(dm.get_current_device(), Device::parse("cuda:0"));
  EXPECT_EQ(backend_->current(), 0);
  const int last = dm.get_device_count() - 1;
  int seen_in_thread = -2;
  std::thread t([&] {
    backend_->set_current(last);
    seen_in_thread = backend_->current();
  });
  t.join();
  EXPECT_EQ(seen_in_thread, last);
  EXPECT_EQ(backend_->current(), 0) << "another thread's set_current leaked into this one";
}

// ---- raw memory ----------------------------------------------------------------

TEST_F(CudaBackendTest, RawAllocReturnsNullOnOutOfMemoryAndStaysUsable) {
  const std::size_t too_big = backend_->device_info(0).total_memory * 4;
  EXPECT_EQ(backend_->raw_alloc(0, too_big), nullptr);
  void* p = backend_->raw_alloc(0, kMiB);
  ASSERT_NE(p, nullptr) << "allocation after an out-of-memory failed: the error stuck";
  backend_->raw_free(0, p);
}

TEST_F(CudaBackendTest, CopiesRoundTripAndAreProfiled) {
  auto s = StreamManager::instance().create_stream(dev_);
  const std::size_t n = 1 << 20;
  std::vector<float> src = random_floats(n, 11), back(n, 0.0f);
  const std::size_t bytes = n * sizeof(float);
  void* d0 = backend_->raw_alloc(0, bytes);
  void* d1 = backend_->raw_alloc(0, bytes);
  ASSERT_TRUE(d0 && d1);
  Profiler& prof = Profiler::instance();
  prof.enable();
  backend_->copy(d0, dev_, src.data(), Device::cpu(), bytes, s->native());
  backend_->copy(d1, dev_, d0, dev_, bytes, s->native());
  backend_->copy(back.data(), Device::cpu(), d1, dev_, bytes, s->native());
  s->synchronize();
  ProfilerCounters c = prof.counters();
  prof.disable();
  EXPECT_EQ(std::memcmp(src.data(), back.data(), bytes), 0);
  EXPECT_EQ(c.copies_h2d, 1u);
  EXPECT_EQ(c.copies_d2d, 1u);
  EXPECT_EQ(c.copies_d2h, 1u);
  EXPECT_EQ(c.bytes_h2d, bytes);
  EXPECT_EQ(c.bytes_d2h, bytes);
  backend_->raw_free(0, d0);
  backend_->raw_free(0, d1);
}

TEST_F(CudaBackendTest, PinnedHostMemoryIsUsableForAsyncCopies) {
  const std::size_t n = 4096, bytes = n * sizeof(float);
  MemoryManager& mm = MemoryManager::instance();
  auto* pinned_in = static_cast<float*>(mm.allocate_pinned(bytes));
  auto* pinned_out = static_cast<float*>(mm.allocate_pinned(bytes));
  ASSERT_TRUE(pinned_in && pinned_out);
  std::vector<float> ref = random_floats(n, 5);
  std::memcpy(pinned_in, ref.data(), bytes);
  std::memset(pinned_out, 0, bytes);
  void* d = backend_->raw_alloc(0, bytes);
  auto s = StreamManager::instance().create_stream(dev_);
  backend_->copy(d, dev_, pinned_in, Device::cpu(), bytes, s->native());
  backend_->copy(pinned_out, Device::cpu(), d, dev_, bytes, s->native());
  s->synchronize();
  EXPECT_EQ(std::memcmp(pinned_out, ref.data(), bytes), 0);
  backend_->raw_free(0, d);
  mm.free_pinned(pinned_in);
  mm.free_pinned(pinned_out);
}

// ---- caching allocator ----------------------------------------------------------

TEST_F(CudaBackendTest, AllocatorReusesABlockFreedOnTheSameStream) {
  CachingAllocator alloc(*backend_, dev_);
  auto s = StreamManager::instance().create_stream(dev_);
  void* a = alloc.allocate(3 * kMiB + 123, s->native());
  MemoryStats before = alloc.stats();
  EXPECT_EQ(before.num_device_allocs, 1u);
  EXPECT_EQ(before.num_cache_misses, 1u);
  EXPECT_EQ(before.requested_bytes, 3 * kMiB + 123);
  EXPECT_EQ(before.allocated_bytes, round_size_class(3 * kMiB + 123));
  alloc.free(a);
  void* b = alloc.allocate(3 * kMiB, s->native());  // same size class
  MemoryStats after = alloc.stats();
  EXPECT_EQ(a, b);
  EXPECT_EQ(after.num_cache_hits, 1u);
  EXPECT_EQ(after.num_device_allocs, 1u);
  EXPECT_EQ(after.num_allocs, 2u);
  EXPECT_EQ(after.num_frees, 1u);
  alloc.free(b);
  EXPECT_EQ(alloc.stats().allocated_bytes, 0u);
  EXPECT_EQ(alloc.stats().reserved_bytes, round_size_class(3 * kMiB + 123));
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().reserved_bytes, 0u);
  EXPECT_EQ(alloc.stats().num_device_frees, 1u);
  EXPECT_EQ(alloc.stats().peak_allocated_bytes, round_size_class(3 * kMiB + 123));
}

TEST_F(CudaBackendTest, AllocatorDoesNotHandABlockToAnotherStreamWhileInUse) {
  CachingAllocator alloc(*backend_, dev_);
  auto s1 = StreamManager::instance().create_stream(dev_);
  auto s2 = StreamManager::instance().create_stream(dev_);
  void* a = alloc.allocate(kMiB, s1->native());
  alloc.free(a);
  void* b = alloc.allocate(kMiB, s2->native());
  EXPECT_NE(a, b) << "a block freed on s1 went to s2 without synchronization";
  alloc.free(b);
}

TEST_F(CudaBackendTest, RecordStreamDelaysReuseUntilTheOtherStreamFinishes) {
  CachingAllocator alloc(*backend_, dev_);
  auto s1 = StreamManager::instance().create_stream(dev_);
  auto s2 = StreamManager::instance().create_stream(dev_);
  void* a = alloc.allocate(kMiB, s1->native());
  alloc.record_stream(a, s2->native());
  spin(300.0, *s2);  // s2 "uses" the block for 300 ms
  alloc.free(a);
  void* b = alloc.allocate(kMiB, s1->native());
  EXPECT_NE(a, b) << "block reused on s1 while s2 still had work queued on it";
  EXPECT_FALSE(s2->query());
  s2->synchronize();
  void* c = alloc.allocate(kMiB, s1->native());
  EXPECT_EQ(a, c) << "block not reused after s2's work finished";
  alloc.free(b);
  alloc.free(c);
}

TEST_F(CudaBackendTest, MemoryLimitRaisesOutOfMemoryWithStatsAndStaysUsable) {
  CachingAllocator alloc(*backend_, dev_);
  alloc.set_memory_limit(64 * kMiB);
  void* a = alloc.allocate(48 * kMiB);
  try {
    alloc.allocate(32 * kMiB);
    FAIL() << "allocation over the 64 MiB limit succeeded";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("limit"), std::string::npos) << msg;
    EXPECT_NE(msg.find("allocated 48.00 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
  }
  EXPECT_EQ(alloc.stats().num_ooms, 1u);
  EXPECT_EQ(alloc.stats().memory_limit, 64 * kMiB);
  alloc.free(a);
  void* b = alloc.allocate(32 * kMiB);  // fits once the 48 MiB block is released
  EXPECT_NE(b, nullptr);
  EXPECT_LE(alloc.stats().reserved_bytes, 64 * kMiB);
  alloc.free(b);
  alloc.set_memory_limit(0);
  EXPECT_EQ(alloc.stats().memory_limit, 0u);
}

TEST_F(CudaBackendTest, DeviceOutOfMemoryRaisesWithStatsAndStaysUsable) {
  CachingAllocator alloc(*backend_, dev_);
  void* small = alloc.allocate(kMiB);
  const std::size_t too_big = backend_->device_info(0).total_memory * 2;
  try {
    alloc.allocate(too_big);
    FAIL() << "allocating twice the device memory succeeded";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("device"), std::string::npos) << msg;
    EXPECT_NE(msg.find("reserved"), std::string::npos) << msg;
  }
  void* again = alloc.allocate(kMiB);
  EXPECT_NE(again, nullptr);
  alloc.free(small);
  alloc.free(again);
}

TEST_F(CudaBackendTest, FreeingAForeignPointerIsATypedError) {
  CachingAllocator alloc(*backend_, dev_);
  int local = 0;
  EXPECT_THROW(alloc.free(&local), InvalidArgumentError);
}

// ---- streams and events ---------------------------------------------------------

TEST_F(CudaBackendTest, EventsTimeKnownWorkInOrder) {
  auto s = StreamManager::instance().create_stream(dev_);
  Event e0(dev_), e1(dev_), e2(dev_);
  e0.record(*s);
  spin(60.0, *s);
  e1.record(*s);
  spin(20.0, *s);
  e2.record(*s);
  EXPECT_FALSE(e2.query()) << "80 ms of queued work already finished?";
  e2.synchronize();
  EXPECT_TRUE(e2.query());
  EXPECT_TRUE(s->query());
  const float t01 = e1.elapsed_ms_since(e0);
  const float t12 = e2.elapsed_ms_since(e1);
  const float t02 = e2.elapsed_ms_since(e0);
  EXPECT_GE(t01, 59.0f);
  EXPECT_LT(t01, 200.0f);
  EXPECT_GE(t12, 19.0f);
  EXPECT_LT(t12, 150.0f);
  EXPECT_NEAR(t02, t01 + t12, 0.5f);
}

TEST_F(CudaBackendTest, EventsWithoutTimingCannotBeTimed) {
  auto s = StreamManager::instance().create_stream(dev_);
  Event a(dev_, /*enable_timing=*/false), b(dev_, /*enable_timing=*/false);
  a.record(*s);
  b.record(*s);
  b.synchronize();
  EXPECT_THROW(b.elapsed_ms_since(a), InvalidArgumentError);
}

TEST_F(CudaBackendTest, StreamWaitEventOrdersWorkAcrossStreams) {
  auto s1 = StreamManager::instance().create_stream(dev_);
  auto s2 = StreamManager::instance().create_stream(dev_);
  const int64_t n = 1 << 16;
  std::vector<float> x = random_floats(n, 21), y = random_floats(n, 22), out(n);
  const std::size_t bytes = n * sizeof(float);
  auto* dx = static_cast<float*>(backend_->raw_alloc(0, bytes));
  auto* dy = static_cast<float*>(backend_->raw_alloc(0, bytes));
  backend_->copy(dx, dev_, x.data(), Device::cpu(), bytes, s1->native());
  backend_->copy(dy, dev_, y.data(), Device::cpu(), bytes, s1->native());
  spin(100.0, *s1);  // without the wait below, s2's copy would run first
  axpy(3.0f, dx, dy, n, *s1);
  Event done(dev_);
  done.record(*s1);
  done.wait(*s2);
  backend_->copy(out.data(), Device::cpu(), dy, dev_, bytes, s2->native());
  s2->synchronize();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], std::fma(3.0f, x[i], y[i])) << "at " << i;
  backend_->raw_free(0, dx);
  backend_->raw_free(0, dy);
}

TEST_F(CudaBackendTest, StreamPrioritiesAreAccepted) {
  // Out-of-range priorities are clamped to the device's range, never rejected.
  auto hi = StreamManager::instance().create_stream(dev_, -100);
  auto lo = StreamManager::instance().create_stream(dev_, 100);
  spin(1.0, *hi);
  spin(1.0, *lo);
  hi->synchronize();
  lo->synchronize();
  EXPECT_TRUE(hi->query() && lo->query());
}

// ---- graphs ---------------------------------------------------------------------

TEST_F(CudaBackendTest, CapturedGraphOfCopyAndKernelReplaysWithTheRightResult) {
  auto s = StreamManager::instance().create_stream(dev_);
  const int64_t n = 100003;  // odd size: the kernel's tail path runs
  const std::size_t bytes = n * sizeof(float);
  MemoryManager& mm = MemoryManager::instance();
  auto* h_x = static_cast<float*>(mm.allocate_pinned(bytes));
  auto* h_y = static_cast<float*>(mm.allocate_pinned(bytes));
  CachingAllocator& alloc = mm.allocator(dev_);
  auto* dx = static_cast<float*>(alloc.allocate(bytes, s->native()));
  auto* dy = static_cast<float*>(alloc.allocate(bytes, s->native()));
  std::vector<float> y0 = random_floats(n, 31);
  backend_->copy(dy, dev_, y0.data(), Device::cpu(), bytes, s->native());
  s->synchronize();

  GraphCapture capture(s);
  capture.begin();
  EXPECT_TRUE(backend_->graphs()->is_capturing(0, s->native()));
  backend_->copy(dx, dev_, h_x, Device::cpu(), bytes, s->native());  // h2d input
  axpy(2.0f, dx, dy, n, *s);                                         // y += 2x
  backend_->copy(h_y, Device::cpu(), dy, dev_, bytes, s->native());  // d2h output
  std::shared_ptr<Graph> graph = capture.end();
  EXPECT_FALSE(backend_->graphs()->is_capturing(0, s->native()));
  // Capture records work without running it: y on the device is untouched.
  std::vector<float> y = y0;
  for (int replay = 0; replay < 3; ++replay) {
    std::vector<float> x = random_floats(n, 100 + replay);  // new input each replay
    std::memcpy(h_x, x.data(), bytes);
    graph->replay(*s);
    s->synchronize();
    for (int64_t i = 0; i < n; ++i) y[i] = std::fma(2.0f, x[i], y[i]);
    ASSERT_EQ(std::memcmp(h_y, y.data(), bytes), 0) << "replay " << replay << " differs";
  }
  alloc.free(dx);
  alloc.free(dy);
  mm.free_pinned(h_x);
  mm.free_pinned(h_y);
}

TEST_F(CudaBackendTest, CaptureOnTheDefaultStreamIsRejected) {
  EXPECT_THROW(backend_->graphs()->begin_capture(0, nullptr), InvalidArgumentError);
  EXPECT_THROW(GraphCapture(StreamManager::instance().default_stream(dev_)), InvalidArgumentError);
}

TEST_F(CudaBackendTest, SynchronizingDuringCaptureInvalidatesItWithATypedError) {
  auto s = StreamManager::instance().create_stream(dev_);
  backend_->graphs()->begin_capture(0, s->native());
  spin(0.1, *s);
  EXPECT_THROW(s->synchronize(), CudaError);  // not capturable
  EXPECT_THROW(backend_->graphs()->end_capture(0, s->native()), CudaError);
  // The stream works normally afterwards.
  spin(1.0, *s);
  s->synchronize();
  EXPECT_TRUE(s->query());
}

// ---- profiler / NVTX ---------------------------------------------------------------

TEST_F(CudaBackendTest, ProfilerRangesWorkWithNvtxHooksInstalled) {
  Profiler& prof = Profiler::instance();
  prof.enable();
  {
    ProfileRange outer("cuda_outer");
    ProfileRange inner("cuda_inner");
  }
  auto events = prof.events();
  prof.disable();
  int found = 0;
  for (const auto& e : events) found += (e.name == "cuda_outer" || e.name == "cuda_inner");
  EXPECT_EQ(found, 2);
}

}  // namespace
}  // namespace xpuruntime
