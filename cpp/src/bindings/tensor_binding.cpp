// Tensor and DLPack (versioned and legacy capsules), zero-copy both ways.
// Imported memory stays owned by its producer: our Storage calls the producer's
// deleter (under the GIL) when the last view goes away. Exported capsules keep
// our storage alive until the consumer calls our deleter.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>

#include "bindings/bindings.h"
#include "bindings/tensor_convert.h"
#include "xpuruntime/dlpack_abi.h"
#include "xpuruntime/device.h"
#include "xpuruntime/error.h"
#include "xpuruntime/stream.h"
#include "xpuruntime/tensor.h"

namespace xpuruntime::bindings {

bool python_alive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

namespace {

constexpr const char* kVersionedName = "dltensor_versioned";
constexpr const char* kLegacyName = "dltensor";
constexpr const char* kUsedVersionedName = "used_dltensor_versioned";
constexpr const char* kUsedLegacyName = "used_dltensor";

DLDataType to_dl_dtype(DType t) {
  switch (t) {
    case DType::kFloat32: return {kDLFloat, 32, 1};
    case DType::kFloat16: return {kDLFloat, 16, 1};
    case DType::kBFloat16: return {kDLBfloat, 16, 1};
    case DType::kFloat64: return {kDLFloat, 64, 1};
    case DType::kInt8: return {kDLInt, 8, 1};
    case DType::kUInt8: return {kDLUInt, 8, 1};
    case DType::kInt16: return {kDLInt, 16, 1};
    case DType::kInt32: return {kDLInt, 32, 1};
    case DType::kInt64: return {kDLInt, 64, 1};
    case DType::kBool: return {kDLBool, 8, 1};
    case DType::kFloat8E4M3: return {kDLFloat8_e4m3fn, 8, 1};
    case DType::kFloat8E5M2: return {kDLFloat8_e5m2, 8, 1};
  }
  XRT_THROW(InvalidArgumentError, "dtype has no DLPack code");
}

}  // namespace

DType from_dl_dtype(DLDataType dt) {
  XRT_CHECK(dt.lanes == 1, UnsupportedOperationError, "DLPack vector types (lanes=", dt.lanes,
            ") are not supported");
  switch (dt.code) {
    case kDLFloat:
      if (dt.bits == 32) return DType::kFloat32;
      if (dt.bits == 16) return DType::kFloat16;
      if (dt.bits == 64) return DType::kFloat64;
      break;
    case kDLBfloat:
      if (dt.bits == 16) return DType::kBFloat16;
      break;
    case kDLInt:
      if (dt.bits == 8) return DType::kInt8;
      if (dt.bits == 16) return DType::kInt16;
      if (dt.bits == 32) return DType::kInt32;
      if (dt.bits == 64) return DType::kInt64;
      break;
    case kDLUInt:
      if (dt.bits == 8) return DType::kUInt8;
      break;
    case kDLBool:
      if (dt.bits == 8) return DType::kBool;
      break;
    case kDLFloat8_e4m3fn: return DType::kFloat8E4M3;
    case kDLFloat8_e5m2: return DType::kFloat8E5M2;
    default: break;
  }
  XRT_THROW(UnsupportedOperationError, "DLPack dtype (code=", int(dt.code), ", bits=", int(dt.bits),
            ") has no xpuruntime equivalent");
}

// The backends say which DLPack codes are theirs (pinned host memory is host memory).
Device from_dl_device(DLDevice d) {
  return DeviceManager::instance().device_from_dlpack(static_cast<int>(d.device_type), d.device_id);
}

namespace {

DLDevice to_dl_device(const Device& d) {
  if (d.is_cpu()) return DLDevice{kDLCPU, 0};
  return DLDevice{static_cast<DLDeviceType>(DeviceManager::instance().dlpack_device_type(d)), d.index};
}

// What an exported tensor owns: a view of our tensor. DLPack's shape/strides point
// into that view's own vectors (consumers only read them), so an export costs
// one allocation.
template <typename Managed>
struct ExportHolder {
  Managed managed{};
  Tensor tensor;
};

template <typename Managed>
Managed* make_managed(const Tensor& t) {
  auto holder = std::make_unique<ExportHolder<Managed>>();
  holder->tensor = t;
  const Tensor& view = holder->tensor;
  DLTensor& dl = holder->managed.dl_tensor;
  dl.data = view.numel() == 0 ? nullptr : view.data_ptr();
  dl.device = to_dl_device(view.device());
  dl.ndim = static_cast<int32_t>(view.dim());
  dl.dtype = to_dl_dtype(view.dtype());
  dl.shape = const_cast<int64_t*>(view.shape().data());
  dl.strides = const_cast<int64_t*>(view.strides().data());
  dl.byte_offset = 0;
  holder->managed.manager_ctx = holder.get();
  holder->managed.deleter = [](Managed* self) {
    // Re-own the holder so its destructor frees it.
    std::unique_ptr<ExportHolder<Managed>> owned(static_cast<ExportHolder<Managed>*>(self->manager_ctx));
  };
  return &holder.release()->managed;
}

template <typename Managed>
void capsule_destructor(PyObject* capsule, const char* live_name) {
  // Only an unconsumed capsule still owns its tensor.
  if (PyCapsule_IsValid(capsule, live_name)) {
    auto* m = static_cast<Managed*>(PyCapsule_GetPointer(capsule, live_name));
    if (m && m->deleter) m->deleter(m);
  }
}

}  // namespace

DLManagedTensorVersioned* to_managed_versioned(const Tensor& t, bool copied) {
  auto* m = make_managed<DLManagedTensorVersioned>(t);
  m->version = {kDLPackMajor, kDLPackMinor};
  m->flags = copied ? kDLPackFlagIsCopied : 0;
  return m;
}

void to_dltensor_view(const Tensor& t, DLTensor* out) {
  out->data = t.numel() == 0 ? nullptr : t.data_ptr();
  out->device = to_dl_device(t.device());
  out->ndim = static_cast<int32_t>(t.dim());
  out->dtype = to_dl_dtype(t.dtype());
  out->shape = const_cast<int64_t*>(t.shape().data());
  out->strides = const_cast<int64_t*>(t.strides().data());
  out->byte_offset = 0;
}

py::capsule tensor_to_capsule(const Tensor& t, bool versioned, bool copied) {
  if (versioned) {
    auto* m = to_managed_versioned(t, copied);
    return py::capsule(m, kVersionedName, [](PyObject* c) {
      capsule_destructor<DLManagedTensorVersioned>(c, kVersionedName);
    });
  }
  auto* m = make_managed<DLManagedTensor>(t);
  return py::capsule(m, kLegacyName, [](PyObject* c) { capsule_destructor<DLManagedTensor>(c, kLegacyName); });
}

namespace {
template <typename Managed>
Tensor adopt_managed(Managed* m) {
  const DLTensor& dl = m->dl_tensor;
  DType dtype = from_dl_dtype(dl.dtype);
  Device device = from_dl_device(dl.device);
  Shape shape(dl.shape, dl.shape + dl.ndim);
  Shape strides = dl.strides ? Shape(dl.strides, dl.strides + dl.ndim) : Tensor::contiguous_strides(shape);
  const auto esize = static_cast<int64_t>(dtype_size(dtype));
  int64_t lo = 0, hi = 0;
  bool empty = false;
  for (int i = 0; i < dl.ndim; ++i) {
    if (shape[i] == 0) empty = true;
    int64_t span = (shape[i] - 1) * strides[i];
    (span < 0 ? lo : hi) += span;
  }
  char* first = static_cast<char*>(dl.data) + dl.byte_offset;
  // Storage starts at the lowest addressed element so negative strides fit.
  char* base = empty ? first : first + lo * esize;
  std::size_t nbytes = empty ? 0 : static_cast<std::size_t>((hi - lo + 1) * esize);
  auto release = [m](void*) {
    if (!m->deleter || !python_alive()) return;
    if (PyGILState_Check()) {  // the common case: released from Python code
      m->deleter(m);
      return;
    }
    py::gil_scoped_acquire gil;  // producers' deleters may touch Python objects
    m->deleter(m);
  };
  auto storage = std::make_shared<Storage>(base, nbytes, device, release);
  return Tensor(std::move(storage), shape, strides, empty ? 0 : -lo, dtype);
}
}  // namespace

Tensor adopt_versioned(DLManagedTensorVersioned* m) {
  auto drop = [m] {
    if (m->deleter) m->deleter(m);  // the spec says the deleter is always safe to call
  };
  if (m->version.major != kDLPackMajor) {
    drop();
    XRT_THROW(UnsupportedOperationError, "DLPack major version ", m->version.major,
              " is not supported (we speak ", kDLPackMajor, ".x)");
  }
  try {
    return adopt_managed(m);
  } catch (...) {
    drop();  // adopt_managed took nothing: the tensor is still ours to release
    throw;
  }
}

Tensor tensor_from_capsule(py::capsule cap) {
  PyObject* c = cap.ptr();
  if (PyCapsule_IsValid(c, kVersionedName)) {
    auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(c, kVersionedName));
    // The capsule hands its tensor over before adopt_versioned, which owns it from then
    // on (and releases it when it throws).
    PyCapsule_SetName(c, kUsedVersionedName);
    return adopt_versioned(m);
  }
  if (PyCapsule_IsValid(c, kLegacyName)) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, kLegacyName));
    Tensor t = adopt_managed(m);
    PyCapsule_SetName(c, kUsedLegacyName);
    return t;
  }
  XRT_THROW(InvalidArgumentError, "not a DLPack capsule, or one already consumed (a DLPack capsule "
                                  "can be imported only once)");
}

void bind_tensor(py::module_& m) {
  bind_tensor_class(m);
  bind_dlpack_exchange(m);
}

}  // namespace xpuruntime::bindings
