#include "core/dispatch/tuning.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "xpuruntime/stream.h"

namespace xpuruntime::tuning {

Timing time_runs(const Device& device, NativeStream stream, int warmup, int iterations,
                 const std::function<void()>& fn) {
  iterations = std::max(1, iterations);
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> times;
  times.reserve(static_cast<std::size_t>(iterations));
  if (device.is_cpu()) {
    // CPU kernels run inline on the calling thread, so the host clock is the device clock.
    for (int i = 0; i < iterations; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      fn();
      auto t1 = std::chrono::steady_clock::now();
      times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
  } else {
    // Device kernels are asynchronous: events on the launch stream measure device time
    // rather than launch overhead. A short kernel timed one launch a sample is mostly
    // event granularity and launch jitter (on an H200, 16 us GEMMs sampled 16-20 us, and
    // a 20% gap ranked as a tie within that noise): each sample spans launches enough for
    // kMinSampleMs and counts their mean.
    constexpr double kMinSampleMs = 0.2;
    constexpr int kMaxLaunchesPerSample = 64;
    auto s = Stream::wrap(device, stream);
    Event start(device, true), stop(device, true);
    auto sample = [&](int launches) {
      start.record(*s);
      for (int r = 0; r < launches; ++r) fn();
      stop.record(*s);
      stop.synchronize();
      return stop.elapsed_ms_since(start) / launches;
    };
    const double one = sample(1);
    const int launches =
        one > 0 && one < kMinSampleMs
            ? std::min(kMaxLaunchesPerSample, static_cast<int>(std::ceil(kMinSampleMs / one)))
            : 1;
    for (int i = 0; i < iterations; ++i) times.push_back(sample(launches));
  }
  std::sort(times.begin(), times.end());
  std::size_t n = times.size();
  Timing t;
  t.median_ms = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  t.noise_ms = 0.5 * (times[(3 * n) / 4 < n ? (3 * n) / 4 : n - 1] - times[n / 4]);
  return t;
}

namespace {

std::string ms(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g ms", v);
  return buf;
}

}  // namespace

Ranking rank(const std::vector<Measured>& m, const std::string& regime) {
  Ranking r;
  for (std::size_t i = 1; i < m.size(); ++i) {
    if (m[i].ms < m[r.fastest].ms) r.fastest = i;
  }
  const double best = m[r.fastest].ms;
  r.winner = r.fastest;
  for (std::size_t i = 0; i < m.size(); ++i) {
    double tol = std::max(m[i].noise_ms + m[r.fastest].noise_ms, 0.01 * best);
    if (m[i].ms - best <= tol) {
      r.winner = i;
      r.tolerance_ms = tol;
      break;
    }
  }
  const Measured& w = m[r.winner];
  r.verdict = "best_performance: device time, regime=" + (regime.empty() ? "unspecified" : regime) +
              "; '" + w.name + "' " + ms(w.ms);
  if (r.winner != r.fastest) {
    r.verdict += ", a tie with the fastest '" + m[r.fastest].name + "' " + ms(best) +
                 " (within the noise " + ms(r.tolerance_ms) + "): the earlier candidate wins";
  } else if (m.size() > 1) {
    std::size_t second = r.winner == 0 ? 1 : 0;
    for (std::size_t i = 0; i < m.size(); ++i) {
      if (i != r.winner && m[i].ms < m[second].ms) second = i;
    }
    char pct[32];
    std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * (m[second].ms - best) / (best > 0 ? best : 1.0));
    r.verdict += ", margin " + std::string(pct) + " over '" + m[second].name + "' " + ms(m[second].ms);
  }
  return r;
}

}  // namespace xpuruntime::tuning
