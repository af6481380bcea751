// Connects the core Profiler's range hooks to NVTX (called once by the plugin entry).
#pragma once

namespace xpuruntime::cuda {
void install_nvtx_hooks();
}  // namespace xpuruntime::cuda
