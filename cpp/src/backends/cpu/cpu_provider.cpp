// The CPU execution provider: the one provider (device_provider.h) over the CPU
// backend, with what differs on the CPU: host memory throughout (nothing to copy),
// and the host-thread settings of a run.
#include "backends/cpu/cpu_provider.h"

#include <cstdlib>
#include <memory>
#include <utility>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels/parallel.h"
#include "xpuruntime/device_provider.h"
#include "xpuruntime/host_threads.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace xpuruntime::cpu {

std::shared_ptr<graph::ExecutionProvider> make_cpu_provider() {
  graph::DeviceTraits traits;
  traits.host_memory = true;
  traits.fusions = [] {
    graph::FusionSupport f;
    f.elementwise_in_place = true;
    return f;
  };
  traits.on_begin_run = [] {
#ifdef _OPENMP
    // The team size is an ICV of the calling thread: each run sets its own.
    const char* env = std::getenv("XRT_NUM_THREADS");
    const long long n = env ? std::strtoll(env, nullptr, 10) : 0;
    if (n > 0) omp_set_num_threads(clamp_host_threads(n));
#endif
  };
  // ExecutionPolicy.threads for this run, on the calling thread: the parallel loops'
  // cap. Only our pool's count changes: the GEMM kernels run OpenBLAS single-threaded
  // inside each piece of the pool's split (ops/gemm.cpp run_gemm), and oneDNN gets the
  // cap as its OpenMP team around each primitive (onednn_context.h). Raising
  // OpenBLAS's own threads here would let its spinning workers fight the pool's
  // helpers and serialize concurrent callers on its lock: measured on bert_base at 2
  // threads, 2.2x slower per run than the same plan without the policy.
  traits.cap_threads = [](int threads) -> std::shared_ptr<void> {
    return std::make_shared<ThreadCap>(threads);
  };
  return graph::make_device_provider(cpu_backend(), std::move(traits));
}

}  // namespace xpuruntime::cpu
