// NVTX ranges for the Profiler (DESIGN.md §10): when the profiler is on, every
// ProfileRange also becomes an NVTX range, so Nsight Systems shows our ranges on
// the CUDA timeline. nvtx3 is header-only: without a tool attached (no
// NVTX_INJECTION64_PATH) each call is a cheap no-op.
#include <nvtx3/nvToolsExt.h>

#include "backends/cuda/cuda_nvtx.h"
#include "xpuruntime/profiler.h"

namespace xpuruntime::cuda {

void install_nvtx_hooks() {
  Profiler::instance().set_nvtx_hooks([](const char* name) { nvtxRangePushA(name); },
                                      [] { nvtxRangePop(); });
}

}  // namespace xpuruntime::cuda
