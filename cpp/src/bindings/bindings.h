// One bind_* function per area; module.cpp calls them in dependency order.
#pragma once

#include <pybind11/pybind11.h>

namespace xpuruntime::bindings {
namespace py = pybind11;

void bind_errors(py::module_& m);
void bind_device(py::module_& m);
void bind_tensor(py::module_& m);
void bind_memory(py::module_& m);
void bind_memory_bench(py::module_& m);  // _core.memory._bench_alloc_sequence
void bind_stream(py::module_& m);
void bind_profiler(py::module_& m);
void bind_policy(py::module_& m);    // KernelPolicy, ExecutionPolicy
void bind_dispatch(py::module_& m);  // KernelRegistry, Dispatcher, OpContext (after bind_policy)
void bind_ops(py::module_& m);       // _core.ops: matmul (after bind_dispatch)
void bind_cuda_kernels(py::module_& m);  // _core.cuda_kernels: attention, layernorm
void bind_routed(py::module_& m);        // _core.routed: registry kernels on raw pointers (after bind_dispatch)
void bind_graph(py::module_& m);         // _core.graph: the native engine (after bind_policy)

}  // namespace xpuruntime::bindings
