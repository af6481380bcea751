#include "backends/cpu/kernels/onednn/onednn_context.h"

#ifdef XRT_HAVE_ONEDNN
#include <omp.h>

#include <cstdlib>
#include <memory>

#include "xpuruntime/error.h"
#endif

namespace xpuruntime::cpu::onednn {

#ifdef XRT_HAVE_ONEDNN

bool onednn_available() { return true; }

std::string onednn_info() {
  const dnnl_version_t* v = dnnl_version();
  std::string runtime = v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other";
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + " (cpu runtime: " + runtime + ")";
}

const dnnl::engine& cpu_engine() {
  static const dnnl::engine* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream s(cpu_engine());
  return s;
}

void* thread_buffer(int slot, std::size_t bytes) {
  struct Buf {
    std::unique_ptr<void, decltype(&std::free)> p{nullptr, &std::free};
    std::size_t size = 0;
  };
  thread_local Buf bufs[4];
  Buf& b = bufs[slot];
  if (b.size < bytes) {
    const std::size_t n = (bytes + 63) / 64 * 64;
    b.p.reset(std::aligned_alloc(64, n));
    XRT_CHECK(b.p != nullptr, OutOfMemoryError, "onednn: cannot allocate ", n,
              " bytes of per-thread scratch");
    b.size = n;
  }
  return b.p.get();
}

OmpThreads::OmpThreads(int threads) : previous_(omp_get_max_threads()) {
  if (threads > 0 && threads != previous_) omp_set_num_threads(threads);
}

OmpThreads::~OmpThreads() {
  if (omp_get_max_threads() != previous_) omp_set_num_threads(previous_);
}

#else

bool onednn_available() { return false; }

std::string onednn_info() {
  return "built without oneDNN (install libdnnl-dev, or pip install onednn-devel-cpu-gomp, and rebuild to "
         "enable the onednn kernels)";
}

#endif

}  // namespace xpuruntime::cpu::onednn
