// Timing of kernel runs for autotuning, and the rule that ranks the times
// (internal to the dispatcher).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "xpuruntime/backend.h"
#include "xpuruntime/device.h"

namespace xpuruntime::tuning {

struct Timing {
  double median_ms = 0;
  double noise_ms = 0;  // half the interquartile spread of the runs
};

// `iterations` runs of fn after `warmup` untimed runs. Device work is timed with the
// backend's events on `stream` (a sample of a kernel shorter than 0.2 ms spans enough
// launches for 0.2 ms, at most 64, and counts their mean); CPU work with the host clock.
Timing time_runs(const Device& device, NativeStream stream, int warmup, int iterations,
                 const std::function<void()>& fn);

// One measured candidate, in the Dispatcher's candidate order.
struct Measured {
  std::string name;
  double ms = 0;
  double noise_ms = 0;
};

struct Ranking {
  std::size_t winner = 0;   // index into the measured list
  std::size_t fastest = 0;  // the smallest time (== winner unless a tie went earlier)
  double tolerance_ms = 0;  // the noise the winner's tie was judged with
  std::string verdict;      // "best_performance: device time, regime=...; ..." for the detail
};

// The first candidate whose time is within noise of the fastest wins (noise: the two
// measurements' noise added, at least 1% of the fastest time), so a difference the
// measurement cannot resolve never flips a choice away from the stable order.
// `measured` must not be empty.
Ranking rank(const std::vector<Measured>& measured, const std::string& regime);

}  // namespace xpuruntime::tuning
