// parallel_for (backends/cpu/kernels/parallel.h): every index once, nested loops inline,
// and an exception thrown by a chunk comes back to the caller as itself (on an
// OpenMP team or our own pool an escaping exception would end the process), with
// the loop usable afterwards.
#include <gtest/gtest.h>

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backends/cpu/kernels/contention.h"
#include "backends/cpu/kernels/parallel.h"
#include "xpuruntime/host_threads.h"
#include "xpuruntime/error.h"

namespace xc = xpuruntime::cpu;

namespace {

constexpr int64_t kBig = int64_t{1} << 40;  // work estimate above any grain

TEST(ParallelFor, CoversEveryIndexOnce) {
  xc::ThreadCap cap(4);
  for (int64_t n : {1, 2, 7, 64, 1000, 4097}) {
    std::vector<std::atomic<int>> seen(static_cast<std::size_t>(n));
    xc::parallel_for(n, kBig, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) seen[static_cast<std::size_t>(i)].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<std::size_t>(i)].load(), 1) << n << " " << i;
  }
}

TEST(ParallelFor, NestedLoopsRunInlineAndCoverEverything) {
  xc::ThreadCap cap(4);
  std::atomic<int64_t> sum{0};
  xc::parallel_for(8, kBig, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      xc::parallel_for(100, kBig, [&](int64_t b2, int64_t e2) {
        for (int64_t j = b2; j < e2; ++j) sum.fetch_add(i * 100 + j);
      });
  });
  EXPECT_EQ(sum.load(), 799 * 800 / 2);
}

TEST(ParallelFor, AChunksExceptionReachesTheCallerAndTheLoopStaysUsable) {
  xc::ThreadCap cap(4);
  for (int rep = 0; rep < 20; ++rep) {
    const int64_t bad = rep % 16;  // first, middle and last chunks
    try {
      xc::parallel_for(16, kBig, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          if (i == bad) XRT_THROW(InvalidArgumentError, "chunk ", i, " refused");
      });
      FAIL() << "no exception for chunk " << bad;
    } catch (const xpuruntime::InvalidArgumentError& err) {
      EXPECT_NE(std::string(err.what()).find("refused"), std::string::npos);
    }
    std::atomic<int64_t> count{0};
    xc::parallel_for(1000, kBig, [&](int64_t b, int64_t e) { count.fetch_add(e - b); });
    ASSERT_EQ(count.load(), 1000);
  }
}

TEST(ParallelFor, NonLibraryExceptionsPropagateToo) {
  xc::ThreadCap cap(2);
  EXPECT_THROW(xc::parallel_for(64, kBig, [](int64_t, int64_t) { throw std::bad_alloc(); }), std::bad_alloc);
}


// The same loops on the contended path (our pool instead of the OpenMP team): every
// index once, nested loops inline, exceptions back to the caller.
class ContendedParallelFor : public ::testing::Test {
 protected:
  void SetUp() override { xc::set_host_contended_for_testing(1); }
  void TearDown() override { xc::set_host_contended_for_testing(-1); }
};

TEST_F(ContendedParallelFor, CoversEveryIndexOnceNestedInlineAndRethrows) {
  ASSERT_TRUE(xc::host_contended());
  xc::ThreadCap cap(4);
  for (int64_t n : {2, 7, 64, 4097}) {
    std::vector<std::atomic<int>> seen(static_cast<std::size_t>(n));
    xc::parallel_for(n, kBig, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) seen[static_cast<std::size_t>(i)].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<std::size_t>(i)].load(), 1) << n << " " << i;
  }
  std::atomic<int64_t> sum{0};
  xc::parallel_for(8, kBig, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      EXPECT_EQ(xc::blocking_threads(), 1);  // inside a chunk nothing may start a team
      xc::parallel_for(100, kBig, [&](int64_t b2, int64_t e2) {
        for (int64_t j = b2; j < e2; ++j) sum.fetch_add(i * 100 + j);
      });
    }
  });
  EXPECT_EQ(sum.load(), 799 * 800 / 2);
  EXPECT_THROW(xc::parallel_for(16, kBig,
                                [&](int64_t b, int64_t) {
                                  if (b == 0) XRT_THROW(InvalidArgumentError, "refused");
                                }),
               xpuruntime::InvalidArgumentError);
}

TEST_F(ContendedParallelFor, BlockingWorkRunsOnOneThreadOnlyWhileContended) {
  xc::ThreadCap cap(2);
  EXPECT_EQ(xc::blocking_threads(), 1);
  xc::set_host_contended_for_testing(0);
  EXPECT_EQ(xc::blocking_threads(), 2);
}

// The measurement itself: with twice as many spinning threads as CPUs, the calling
// thread waits for a CPU most of the time it wants one, which host_contended() must see
// within a couple of seconds (it samples /proc/thread-self/schedstat every 10 ms).
TEST(HostContention, SeesBusyThreadsOfThisProcess) {
  if (access("/proc/thread-self/schedstat", R_OK) != 0) GTEST_SKIP() << "no schedstat here";
  xc::set_host_contended_for_testing(-1);
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int i = 0; i < 2 * xpuruntime::available_cpus(); ++i)
    busy.emplace_back([&] {
      volatile uint64_t x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  bool seen = false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  volatile double acc = 0;
  while (!seen && std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 100000; ++i) acc = acc + i * 0.5;  // wants a CPU all the time
    seen = xc::host_contended();
  }
  stop = true;
  for (auto& t : busy) t.join();
  EXPECT_TRUE(seen) << "6+ runnable threads on " << xpuruntime::available_cpus()
                    << " CPUs, yet no contention measured";
}

TEST(HostThreads, AvailableCpusIsWithinTheAffinityMask) {
  const int n = xpuruntime::available_cpus();
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_GE(n, 1);
  EXPECT_LE(n, CPU_COUNT(&set));
  EXPECT_NE(xpuruntime::available_cpus_reason().find("affinity"), std::string::npos)
      << xpuruntime::available_cpus_reason();
  EXPECT_LE(xc::default_threads(), std::max(n, xc::default_threads()));
}

}  // namespace
