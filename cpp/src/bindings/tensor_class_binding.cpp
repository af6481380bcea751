// The Python Tensor class and numpy/DLPack entry points (xpuruntime.Tensor,
// xpuruntime.from_dlpack). Zero-copy unless a copy is asked for or unavoidable
// (a CUDA tensor viewed as numpy is copied to the host).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>

#include "bindings/bindings.h"
#include "bindings/tensor_convert.h"
#include "xpuruntime/device.h"
#include "xpuruntime/error.h"
#include "xpuruntime/stream.h"

namespace xpuruntime::bindings {
namespace {

py::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::kBFloat16:
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2: {
      // numpy has no such types; ml_dtypes (a jax/tensorflow dependency) provides them.
      py::module_ ml;
      try {
        ml = py::module_::import("ml_dtypes");
      } catch (py::error_already_set&) {
        XRT_THROW(UnsupportedOperationError, "numpy has no ", dtype_name(t),
                  " type: install ml_dtypes (pip install ml-dtypes) or export through DLPack");
      }
      return py::dtype::from_args(ml.attr(std::string(dtype_name(t)).c_str()));
    }
    case DType::kBool: return py::dtype("bool");
    default: return py::dtype(std::string(dtype_name(t)));
  }
}

DType dtype_of_numpy(const py::dtype& dt) {
  XRT_CHECK(dt.byteorder() != '>', InvalidArgumentError,
            "big-endian numpy arrays are not supported: convert with arr.astype(arr.dtype.newbyteorder('='))");
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  if (kind == 'f' && size == 4) return DType::kFloat32;
  if (kind == 'f' && size == 2) return DType::kFloat16;
  if (kind == 'f' && size == 8) return DType::kFloat64;
  if (kind == 'i' && size == 1) return DType::kInt8;
  if (kind == 'i' && size == 2) return DType::kInt16;
  if (kind == 'i' && size == 4) return DType::kInt32;
  if (kind == 'i' && size == 8) return DType::kInt64;
  if (kind == 'u' && size == 1) return DType::kUInt8;
  if (kind == 'b') return DType::kBool;
  // Only now the name: numpy computes dtype.name in Python (microseconds per call).
  std::string name = py::str(dt.attr("name"));
  if (name == "bfloat16") return DType::kBFloat16;
  if (name == "float8_e4m3fn") return DType::kFloat8E4M3;
  if (name == "float8_e5m2") return DType::kFloat8E5M2;
  XRT_THROW(UnsupportedOperationError, "numpy dtype ", name,
            " is not supported; supported: float32, float16, bfloat16, float64, int8, uint8, "
            "int16, int32, int64, bool");
}

// DLPack stream argument (array API): None/1 legacy default, 2 per-thread default,
// -1 no synchronization, other values a cudaStream_t.
void sync_for_consumer(const Tensor& t, const py::object& stream) {
  if (t.device().is_cpu() || stream.is_none()) return;
  auto value = stream.cast<int64_t>();
  if (value == -1) return;
  XRT_CHECK(value != 0, InvalidArgumentError, "DLPack stream 0 is disallowed for ", t.device().kind.name(),
            " (use 1 or 2)");
  auto consumer = reinterpret_cast<NativeStream>(value == 1 ? 0 : value);
  order_streams(t.device(), current_native_stream(t.device()), consumer);
}

}  // namespace

NativeStream current_native_stream(const Device& d) {
  return !d.is_cpu() ? StreamManager::instance().current_stream(d)->native() : nullptr;
}

py::object tensor_dlpack(const Tensor& self, const py::object& stream, const py::object& max_version,
                         const py::object& dl_device, const py::object& copy) {
  Tensor t = self;
  bool copied = false;
  bool copy_allowed = copy.is_none() || copy.cast<bool>();
  bool copy_required = !copy.is_none() && copy.cast<bool>();
  if (!dl_device.is_none()) {
    auto pair = dl_device.cast<std::pair<int, int>>();
    Device want = t.device();
    try {
      want = DeviceManager::instance().device_from_dlpack(pair.first, pair.second);
    } catch (const UnsupportedOperationError&) {  // a device this build does not serve: not ours
      if (!copy_allowed) throw py::buffer_error("__dlpack__: dl_device differs and copy=False");
      throw;
    }
    if (want != t.device()) {
      if (!copy_allowed) throw py::buffer_error("__dlpack__: dl_device differs and copy=False");
      py::gil_scoped_release release;
      t = t.to(want, current_native_stream(!want.is_cpu() ? want : t.device()), true);
      copied = true;
    }
  }
  if (copy_required && !copied) {
    py::gil_scoped_release release;
    t = t.to(t.device(), current_native_stream(t.device()), true);
    copied = true;
  }
  if (t.device().is_cpu()) {
    XRT_CHECK(stream.is_none() || stream.cast<int64_t>() == -1, InvalidArgumentError,
              "__dlpack__: stream must be None for CPU tensors");
  } else {
    sync_for_consumer(t, stream);
  }
  bool versioned = false;
  if (!max_version.is_none()) {
    auto v = max_version.cast<std::pair<int, int>>();
    versioned = v.first >= 1;
  }
  count_dlpack(DLPackRoute::kExportDunderGeneral);
  return tensor_to_capsule(t, versioned, copied);
}

Tensor tensor_from_numpy(const py::array& arr) {
  DType dtype = dtype_of_numpy(arr.dtype());
  const auto esize = static_cast<int64_t>(arr.itemsize());
  Shape shape(arr.shape(), arr.shape() + arr.ndim());
  Shape strides(arr.ndim());
  for (py::ssize_t i = 0; i < arr.ndim(); ++i) {
    XRT_CHECK(arr.strides(i) % esize == 0, InvalidArgumentError,
              "numpy strides must be multiples of the item size; copy with np.ascontiguousarray");
    strides[i] = arr.strides(i) / esize;
  }
  // View the numpy buffer in place; the array stays alive as long as our storage.
  auto* data = const_cast<void*>(arr.data());
  py::object keep = arr;
  int64_t lo = 0, hi = 0;
  bool empty = false;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) empty = true;
    int64_t span = (shape[i] - 1) * strides[i];
    (span < 0 ? lo : hi) += span;
  }
  char* base = empty ? static_cast<char*>(data) : static_cast<char*>(data) + lo * esize;
  std::size_t nbytes = empty ? 0 : static_cast<std::size_t>((hi - lo + 1) * esize);
  auto holder = std::make_shared<py::object>(std::move(keep));
  auto release = [holder](void*) mutable {
    if (python_alive()) {
      py::gil_scoped_acquire gil;
      *holder = py::object();
    } else {
      // The interpreter is gone: the array went with it; drop our handle unreleased.
      holder->release();
    }
  };
  auto storage = std::make_shared<Storage>(base, nbytes, Device::cpu(), release);
  return Tensor(std::move(storage), shape, strides, empty ? 0 : -lo, dtype);
}

py::array tensor_to_numpy(const Tensor& t) {
  Tensor host = t;
  if (!t.device().is_cpu()) {
    py::gil_scoped_release release;
    host = t.to(Device::cpu(), current_native_stream(t.device()));
  }
  std::vector<py::ssize_t> shape(host.shape().begin(), host.shape().end());
  std::vector<py::ssize_t> strides;
  for (int64_t s : host.strides()) strides.push_back(s * static_cast<int64_t>(host.element_size()));
  auto keep = std::make_unique<Tensor>(host);
  py::capsule base(keep.get(), [](void* p) { std::unique_ptr<Tensor> owned(static_cast<Tensor*>(p)); });
  keep.release();
  return py::array(numpy_dtype(host.dtype()), shape, strides, host.numel() ? host.data_ptr() : nullptr, base);
}

Tensor tensor_from_python(const py::handle& obj) {
  if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>();
  if (py::isinstance<py::array>(obj)) return tensor_from_numpy(py::reinterpret_borrow<py::array>(obj));
  if (py::isinstance<py::capsule>(obj)) {
    count_dlpack(DLPackRoute::kImportCapsule);
    return tensor_from_capsule(py::reinterpret_borrow<py::capsule>(obj));
  }
  if (Tensor t; try_import_via_exchange_api(obj, &t)) return t;  // torch and other C-table producers
  if (py::hasattr(obj, "__dlpack__")) {
    count_dlpack(DLPackRoute::kImportDunder);
    py::object stream = py::none();
    if (py::hasattr(obj, "__dlpack_device__")) {
      auto dev = obj.attr("__dlpack_device__")().cast<std::pair<int, int>>();
      const Device dd = DeviceManager::instance().device_from_dlpack(dev.first, dev.second);
      if (!dd.is_cpu()) {  // a device: ask the producer to order its work before our stream
        NativeStream ours = current_native_stream(dd);
        stream = py::int_(ours ? reinterpret_cast<int64_t>(ours) : 1);
      }
    }
    py::object cap;
    try {
      cap = obj.attr("__dlpack__")(py::arg("stream") = stream, py::arg("max_version") = py::make_tuple(1, 1));
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_TypeError)) throw;
      cap = obj.attr("__dlpack__")(py::arg("stream") = stream);  // a pre-1.0 producer
    }
    return tensor_from_capsule(cap.cast<py::capsule>());
  }
  // Python scalars and sequences: through numpy (a copy, by necessity).
  if (py::isinstance<py::sequence>(obj) || py::isinstance<py::float_>(obj) || py::isinstance<py::int_>(obj)) {
    py::array arr = py::module_::import("numpy").attr("asarray")(obj);
    return tensor_from_numpy(arr);
  }
  XRT_THROW(InvalidArgumentError, "cannot make a tensor from an object of type ",
            std::string(py::str(py::type::handle_of(obj).attr("__name__"))),
            ": pass a numpy array, an xpuruntime Tensor or an object with __dlpack__");
}

void bind_tensor_class(py::module_& m) {
  py::class_<Tensor>(m, "Tensor", "A strided tensor on a device with shared storage (DLPack-capable).")
      .def_static("empty",
                  [](const std::vector<int64_t>& shape, const std::string& dtype, const std::string& device) {
                    Device d = Device::parse(device);
                    py::gil_scoped_release release;
                    return Tensor::empty(shape, dtype_from_name(dtype), d, current_native_stream(d));
                  },
                  py::arg("shape"), py::arg("dtype") = "float32", py::arg("device") = "cpu")
      .def_static("zeros",
                  [](const std::vector<int64_t>& shape, const std::string& dtype, const std::string& device) {
                    Device d = Device::parse(device);
                    py::gil_scoped_release release;
                    return Tensor::zeros(shape, dtype_from_name(dtype), d);
                  },
                  py::arg("shape"), py::arg("dtype") = "float32", py::arg("device") = "cpu")
      .def_static("from_numpy", &tensor_from_numpy, py::arg("array"), "Zero-copy view of a numpy array.")
      .def_static("from_dlpack", [](py::object obj) { return tensor_from_python(obj); }, py::arg("obj"))
      .def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.shape())); })
      .def_property_readonly("strides", [](const Tensor& t) { return py::tuple(py::cast(t.strides())); },
                             "Strides in elements (like torch), not bytes.")
      .def_property_readonly("offset", &Tensor::offset)
      .def_property_readonly("dtype", [](const Tensor& t) { return std::string(dtype_name(t.dtype())); })
      .def_property_readonly("device", [](const Tensor& t) { return t.device().str(); })
      .def_property_readonly("ndim", &Tensor::dim)
      .def_property_readonly("numel", &Tensor::numel)
      .def_property_readonly("nbytes", &Tensor::nbytes)
      .def_property_readonly("itemsize", &Tensor::element_size)
      .def_property_readonly("data_ptr", [](const Tensor& t) {
        return t.numel() ? reinterpret_cast<uintptr_t>(t.data_ptr()) : uintptr_t{0};
      })
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("numpy", &tensor_to_numpy, "A numpy view (zero-copy on CPU; CUDA tensors are copied).")
      .def("__array__",
           [](const Tensor& t, py::object dtype, py::object copy) {
             py::array a = tensor_to_numpy(t);
             if (!dtype.is_none()) a = a.attr("astype")(dtype);
             if (!copy.is_none() && copy.cast<bool>()) a = a.attr("copy")();
             return a;
           },
           py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def("to",
           [](const Tensor& t, const std::string& device, bool copy) {
             Device d = Device::parse(device);
             py::gil_scoped_release release;
             return t.to(d, current_native_stream(!d.is_cpu() ? d : t.device()), copy);
           },
           py::arg("device"), py::arg("copy") = false)
      .def("contiguous",
           [](const Tensor& t) {
             py::gil_scoped_release release;
             return t.contiguous(current_native_stream(t.device()));
           })
      .def("reshape", [](const Tensor& t, const std::vector<int64_t>& s) { return t.reshape(s); })
      .def("transpose", &Tensor::transpose, py::arg("dim0"), py::arg("dim1"))
      .def("copy_",
           [](Tensor& t, py::object src) {
             Tensor s = tensor_from_python(src);
             py::gil_scoped_release release;
             t.copy_from(s, current_native_stream(!t.device().is_cpu() ? t.device() : s.device()));
             return t;
           },
           py::arg("src"))
      // __dlpack__, __dlpack_device__ and to_torch are installed by bind_dlpack_exchange.
      .def("__len__", [](const Tensor& t) {
        XRT_CHECK(t.dim() > 0, InvalidArgumentError, "len() of a 0-d tensor");
        return t.shape()[0];
      })
      .def("__repr__", &Tensor::str);
}

}  // namespace xpuruntime::bindings
