// The oneDNN runtime the CPU kernels of this folder share: one CPU engine for the
// process, a stream per calling thread, the library's version for the decision
// log, and the OpenMP thread count a primitive is created and run with.
//
// oneDNN from Debian (libdnnl-dev, 2.x) or PyPI (onednn-cpu-gomp, 3.x; the API
// differences live in onednn_compat.h) runs its primitives on OpenMP. The plan's
// thread count (a ThreadCap under ExecutionPolicy.threads; 1 on a contended machine,
// contention.h) is handed to OpenMP around each oneDNN call by OmpThreads; oneDNN
// splits a convolution's work by the count it sees when the primitive is created, so
// that count is part of every primitive's cache key.
//
// Without oneDNN in the build (XRT_HAVE_ONEDNN undefined) only onednn_available()
// and onednn_info() exist: the kernels register and reject every case with
// backend_unavailable and the install hint, as cpu_blas does without OpenBLAS.
#pragma once

#include <string>

#ifdef XRT_HAVE_ONEDNN
#include <dnnl.hpp>
#endif

namespace xpuruntime::cpu::onednn {

// True when this build links oneDNN.
bool onednn_available();
// "oneDNN 3.2.0 (cpu runtime: OpenMP)" or the install hint when not built with it.
std::string onednn_info();

#ifdef XRT_HAVE_ONEDNN

// The process's CPU engine (created on first use, never destroyed: primitives may
// outlive static destruction in a plan cache).
const dnnl::engine& cpu_engine();
// This thread's stream on cpu_engine() (a oneDNN stream is not thread-safe).
dnnl::stream& thread_stream();

// This thread's 64-byte aligned buffer number `slot` (0-3: a run's reordered src,
// dst and weights, and a primitive's scratchpad), grown to at least `bytes` and
// reused across steps. Throws OutOfMemoryError.
void* thread_buffer(int slot, std::size_t bytes);

// While alive, OpenMP regions started on this thread use `threads` threads; the
// destructor restores the previous count. threads <= 0 changes nothing.
class OmpThreads {
 public:
  explicit OmpThreads(int threads);
  ~OmpThreads();
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int previous_ = 0;
};

#endif

}  // namespace xpuruntime::cpu::onednn
