// Conversions between Python objects and Tensor, shared by every binding that
// takes tensors (ops, graph, kernels). All functions need the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include "xpuruntime/tensor.h"

namespace xpuruntime::bindings {
namespace py = pybind11;

// A Tensor viewing any of: an xpuruntime Tensor, a numpy array (zero-copy), an
// object with __dlpack__ (zero-copy; the producer is kept alive), or a DLPack
// capsule. Throws InvalidArgumentError naming the type otherwise.
Tensor tensor_from_python(const py::handle& obj);
// Zero-copy view of a numpy array (any dtype we know, any byte strides that are
// multiples of the item size).
Tensor tensor_from_numpy(const py::array& arr);
// A numpy array viewing a CPU tensor (CUDA tensors are copied to the host first).
py::array tensor_to_numpy(const Tensor& t);
py::capsule tensor_to_capsule(const Tensor& t, bool versioned, bool copied);
Tensor tensor_from_capsule(py::capsule cap);
// False once the interpreter is finalizing (no Python calls allowed then).
bool python_alive();
void bind_tensor_class(py::module_& m);

}  // namespace xpuruntime::bindings
