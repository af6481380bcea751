// Every kernel of the CPU device folder, registered in one call: the op kernels of
// backends/cpu/ops (one per OpDef) and the matmul kernels cpu_blas / cpu_blocked.
// The CPU plugin entry calls it once for the process registry; tests call it on
// their own registries.
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime {

// Registers all CPU kernels into `registry`. Idempotent per registry: a kernel whose
// (op, name) is already registered there is left as it is. Thread-safe.
void register_cpu_kernels(KernelRegistry& registry);

}  // namespace xpuruntime
