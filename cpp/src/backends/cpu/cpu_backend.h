// The CPU device backend: aligned host memory, memcpy, and streams whose work runs
// inline (so in order); events are host timestamps.
#pragma once

#include "xpuruntime/backend.h"

namespace xpuruntime {

// The process-wide CPU backend (never destroyed).
DeviceBackend& cpu_backend();

}  // namespace xpuruntime
