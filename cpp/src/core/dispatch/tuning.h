// Timing of kernel runs for autotuning (internal to the dispatcher).
#pragma once

#include <functional>

#include "xpuruntime/backend.h"
#include "xpuruntime/device.h"

namespace xpuruntime::tuning {

// Median milliseconds of `iterations` runs of fn after `warmup` untimed runs. Device
// work is timed with the backend's events on `stream`; CPU work with the host clock.
double median_ms(const Device& device, NativeStream stream, int warmup, int iterations,
                 const std::function<void()>& fn);

}  // namespace xpuruntime::tuning
