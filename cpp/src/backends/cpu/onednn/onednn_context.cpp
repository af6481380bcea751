#include "backends/cpu/onednn/onednn_context.h"

#ifdef XRT_HAVE_ONEDNN
#include <omp.h>
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

OmpThreads::OmpThreads(int threads) : previous_(omp_get_max_threads()) {
  if (threads > 0 && threads != previous_) omp_set_num_threads(threads);
}

OmpThreads::~OmpThreads() {
  if (omp_get_max_threads() != previous_) omp_set_num_threads(previous_);
}

#else

bool onednn_available() { return false; }

std::string onednn_info() {
  return "built without oneDNN (install libdnnl-dev and rebuild to enable the onednn kernels)";
}

#endif

}  // namespace xpuruntime::cpu::onednn
