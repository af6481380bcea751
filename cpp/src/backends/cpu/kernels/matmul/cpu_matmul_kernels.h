// The CPU matmul kernels' registration entry points (see cpu_gemm_impl.h for the
// kernels themselves). Thread-safe.
#pragma once

#include "xpuruntime/kernel_registry.h"

namespace xpuruntime {

// Registers cpu_packed (priority 40; backend_unavailable without AVX-512F), onednn
// (30), cpu_blas (priority 20; rejects with backend_unavailable when the build
// found no CBLAS) and cpu_blocked (priority 10, the fallback) for op "matmul",
// replacing earlier registrations of the same names.
void register_cpu_matmul_kernels(KernelRegistry& registry);

}  // namespace xpuruntime
