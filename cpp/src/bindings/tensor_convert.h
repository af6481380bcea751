// Conversions between Python objects and Tensor, shared by every binding that
// takes tensors (ops, graph, kernels). All functions need the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include "xpuruntime/dlpack_abi.h"
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
// An owning versioned DLPack export of `t`: a view kept alive until its deleter runs.
DLManagedTensorVersioned* to_managed_versioned(const Tensor& t, bool copied);
// Views a producer's tensor. Always takes ownership of `m`: when it throws
// (unsupported dtype/device/version) it has already called m's deleter.
Tensor adopt_versioned(DLManagedTensorVersioned* m);
// DLPack dtype/device → ours; UnsupportedOperationError names what has no equivalent.
DType from_dl_dtype(DLDataType dt);
Device from_dl_device(DLDevice d);
// A non-owning DLTensor borrowing `t`'s shape and strides (valid while `t` lives).
void to_dltensor_view(const Tensor& t, DLTensor* out);
// `Tensor.__dlpack__` with every argument (stream, max_version, dl_device, copy).
py::object tensor_dlpack(const Tensor& self, const py::object& stream, const py::object& max_version,
                         const py::object& dl_device, const py::object& copy);
// Our current stream of a device (nullptr for the CPU and the default stream).
NativeStream current_native_stream(const Device& d);

// DLPack C exchange API and the lean protocol entry points (dlpack_exchange_binding.cpp).
// Imports `obj` through its type's `__dlpack_c_exchange_api__` when it has a usable
// one, ordering the producer's current work stream before ours; false otherwise.
bool try_import_via_exchange_api(const py::handle& obj, Tensor* out);
// Makes `consumer` wait for the work queued so far on `producer` (nothing when equal).
void order_streams(const Device& d, NativeStream producer, NativeStream consumer);
// Which DLPack path served a call, counted for `_core._dlpack_stats()`.
enum class DLPackRoute {
  kImportExchangeApi,    // from_dlpack(obj) through the producer's C table
  kImportDunder,         // from_dlpack(obj) through obj.__dlpack__()
  kImportCapsule,        // from_dlpack(capsule)
  kExportDunderFast,     // our __dlpack__, common arguments
  kExportDunderGeneral,  // our __dlpack__ with a copy or a device change
  kExportExchangeApi,    // a consumer called our C table
  kToTorch,              // Tensor.to_torch() through torch's C table
  kStreamWait,           // an event wait inserted between two streams
  kCount
};
void count_dlpack(DLPackRoute r) noexcept;
// Installs the fast __dlpack__/__dlpack_device__/to_torch, our exchange API capsule
// and the module-level from_dlpack on the bound Tensor class.
void bind_dlpack_exchange(py::module_& m);
// False once the interpreter is finalizing (no Python calls allowed then).
bool python_alive();
void bind_tensor_class(py::module_& m);

}  // namespace xpuruntime::bindings
