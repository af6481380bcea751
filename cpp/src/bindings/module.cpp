// The pybind11 module xpuruntime._core: declarations and exports only; each area
// binds itself in its own file.
#include "bindings/bindings.h"

PYBIND11_MODULE(_core, m) {
  using namespace xpuruntime::bindings;
  m.doc() = "xpuruntime C++ core (data plane)";
  bind_errors(m);
  bind_device(m);
  bind_tensor(m);
  bind_memory(m);
  bind_memory_bench(m);
  bind_stream(m);
  bind_profiler(m);
  bind_policy(m);
  bind_dispatch(m);
  bind_ops(m);
  bind_cuda_kernels(m);
  bind_routed(m);
  bind_graph(m);
}
