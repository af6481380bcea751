#include "core/dispatch/tuning.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "xpuruntime/stream.h"

namespace xpuruntime::tuning {

double median_ms(const Device& device, NativeStream stream, int warmup, int iterations,
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
    // rather than launch overhead.
    auto s = Stream::wrap(device, stream);
    Event start(device, true), stop(device, true);
    for (int i = 0; i < iterations; ++i) {
      start.record(*s);
      fn();
      stop.record(*s);
      stop.synchronize();
      times.push_back(stop.elapsed_ms_since(start));
    }
  }
  std::sort(times.begin(), times.end());
  std::size_t n = times.size();
  return n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
}

}  // namespace xpuruntime::tuning
