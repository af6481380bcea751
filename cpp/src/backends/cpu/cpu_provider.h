// The CPU execution provider (xpuruntime/provider.h): kernels read and write host
// memory, so inputs, outputs and constants bind zero-copy; a run's arena and
// run-time shaped buffers come from the CPU CachingAllocator; there is no
// stream and no capture.
#pragma once

#include <memory>

#include "xpuruntime/provider.h"

namespace xpuruntime::cpu {

// A new CPU provider (name "cpu"). The core adds one to graph::ProviderRegistry
// when it starts; tests may build their own.
std::shared_ptr<graph::ExecutionProvider> make_cpu_provider();

}  // namespace xpuruntime::cpu
