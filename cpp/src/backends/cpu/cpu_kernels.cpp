// register_cpu_kernels: the CPU folder's one registration (see cpu_kernels.h).
#include "backends/cpu/cpu_kernels.h"

#include "backends/cpu/kernels/matmul/cpu_matmul_kernels.h"
#include "backends/cpu/kernels/cpu_op.h"

namespace xpuruntime {

void register_cpu_kernels(KernelRegistry& registry) {
  cpu::register_cpu_op_kernels(registry);
  // Registered only when absent: replacing them would bump the registry's generation
  // (dropping tuning results) on every call.
  if (!registry.find("matmul", "cpu_blas") || !registry.find("matmul", "cpu_blocked")) {
    register_cpu_matmul_kernels(registry);
  }
}

}  // namespace xpuruntime
