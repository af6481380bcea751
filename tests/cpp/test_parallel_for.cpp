// parallel_for (backends/cpu/kernels/parallel.h): every index once, nested loops inline,
// and an exception thrown by a chunk comes back to the caller as itself (on an
// OpenMP team or our own pool an escaping exception would end the process), with
// the loop usable afterwards.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "backends/cpu/kernels/parallel.h"
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

}  // namespace
