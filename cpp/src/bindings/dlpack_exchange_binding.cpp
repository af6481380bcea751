// DLPack's C exchange API (`__dlpack_c_exchange_api__`, DLPack >= 1.3) both ways, and
// lean entry points for the Python protocol (`__dlpack__`, `__dlpack_device__`,
// `from_dlpack`, `Tensor.to_torch`).
//
// Why: a round trip with torch through the Python protocol spends most of its time in
// Python (torch's `Tensor.__dlpack__` negotiates streams in Python) and in pybind11's
// argument handling (kwargs, tuple→pair casts). Here the importer calls the producer's
// C table directly and orders streams itself; our exports are plain CPython functions
// that handle the common arguments and hand anything unusual (a copy, another device)
// to the general implementation in tensor_class_binding.cpp.
// Everything here runs under the GIL except `current_work_stream` and the allocator,
// which touch no Python state unless they fail.
#include <pybind11/numpy.h>

#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "bindings/bindings.h"
#include "bindings/tensor_convert.h"
#include "xpuruntime/device.h"
#include "xpuruntime/error.h"
#include "xpuruntime/stream.h"

namespace xpuruntime::bindings {
namespace {

constexpr std::size_t kRoutes = static_cast<std::size_t>(DLPackRoute::kCount);
constexpr std::array<const char*, kRoutes> kRouteNames = {
    "import_exchange_api", "import_dunder", "import_capsule",  "export_dunder_fast",
    "export_dunder_general", "export_exchange_api", "to_torch", "stream_waits"};
std::array<std::atomic<uint64_t>, kRoutes> g_route_counts{};

// Sets the Python error indicator from the C++ exception being handled (call only
// inside a catch block), through the module's registered translators: the same
// mapping to XpuRuntimeError & co. that pybind11 applies to bound functions.
void set_python_error() noexcept {
  try {
    throw;
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (...) {
    try {
      py::detail::try_translate_exceptions();
    } catch (...) {
      PyErr_SetString(PyExc_RuntimeError, "xpuruntime: an unknown C++ exception escaped a DLPack call");
    }
  }
}

[[noreturn]] void throw_python_error(const char* what) {
  if (PyErr_Occurred()) throw py::error_already_set();
  XRT_THROW(XpuRuntimeError, what, " failed without setting a Python error");
}

// ---- consumer side: finding a producer's table -------------------------------------

// A table of our major version: this one or an older one down its prev_api chain.
const DLPackExchangeAPI* usable_table(const DLPackExchangeAPI* api) {
  for (auto* h = reinterpret_cast<const DLPackExchangeAPIHeader*>(api); h; h = h->prev_api) {
    if (h->version.major != kDLPackMajor) continue;
    auto* t = reinterpret_cast<const DLPackExchangeAPI*>(h);
    return t->managed_tensor_from_py_object_no_sync && t->current_work_stream ? t : nullptr;
  }
  return nullptr;
}

const DLPackExchangeAPI* lookup_table(PyTypeObject* type) {
  PyObject* attr = PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), kDLPackExchangeAttr);
  if (!attr) {
    PyErr_Clear();
    return nullptr;
  }
  void* p = PyCapsule_IsValid(attr, kDLPackExchangeCapsuleName)
                ? PyCapsule_GetPointer(attr, kDLPackExchangeCapsuleName)
                : nullptr;
  Py_DECREF(attr);  // the spec makes the table itself live as long as the process
  return p ? usable_table(static_cast<const DLPackExchangeAPI*>(p)) : nullptr;
}

// The spec lets consumers cache the table per type. Entries hold a reference to
// their type so its address cannot be reused by another type; the cache is bounded
// (types past the bound are looked up on every call, which is correct, only slower).
// Guarded by the GIL.
const DLPackExchangeAPI* exchange_table_of(PyTypeObject* type) {
  struct Entry {
    PyTypeObject* type;
    const DLPackExchangeAPI* api;  // nullptr: the type has no usable table
  };
  constexpr std::size_t kMaxCachedTypes = 64;
  static std::vector<Entry> cache;
  for (const Entry& e : cache)
    if (e.type == type) return e.api;
  const DLPackExchangeAPI* api = lookup_table(type);
  if (cache.size() < kMaxCachedTypes) {
    Py_INCREF(type);  // kept for the process lifetime, like the table
    cache.push_back({type, api});
  }
  return api;
}

// ---- producer side: our table --------------------------------------------------------

// Methods bound to our type get our instances; the C table checks (consumers may err).
const Tensor& tensor_of(PyObject* obj) { return py::handle(obj).cast<const Tensor&>(); }

const Tensor& checked_tensor_of(PyObject* obj) {
  if (!py::isinstance<Tensor>(obj)) {
    PyErr_Format(PyExc_TypeError,
                 "xpuruntime.Tensor's DLPack exchange API got a %s: it exports xpuruntime.Tensor objects "
                 "only (look the table up on type(obj))",
                 Py_TYPE(obj)->tp_name);
    throw py::error_already_set();
  }
  return tensor_of(obj);
}

int export_managed(void* py_object, DLManagedTensorVersioned** out) {
  try {
    *out = to_managed_versioned(checked_tensor_of(static_cast<PyObject*>(py_object)), false);
    count_dlpack(DLPackRoute::kExportExchangeApi);
    return 0;
  } catch (...) {
    set_python_error();
    return -1;
  }
}

int export_borrowed(void* py_object, DLTensor* out) {
  try {
    to_dltensor_view(checked_tensor_of(static_cast<PyObject*>(py_object)), out);
    count_dlpack(DLPackRoute::kExportExchangeApi);
    return 0;
  } catch (...) {
    set_python_error();
    return -1;
  }
}

int import_managed(DLManagedTensorVersioned* tensor, void** out_py_object) {
  try {
    Tensor t = adopt_versioned(tensor);  // owns `tensor` from here, even when it throws
    *out_py_object = py::cast(std::move(t)).release().ptr();
    return 0;
  } catch (...) {
    set_python_error();
    return -1;
  }
}

std::string kinds_text() {
  std::string out;
  for (DeviceKind k : DeviceKind::all()) out += (out.empty() ? "" : ", ") + std::string(k.name());
  return out;
}

int allocate_managed(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                     void (*set_error)(void*, const char*, const char*)) {
  *out = nullptr;
  try {
    const int kind = static_cast<int>(prototype->device.device_type);
    Device d = Device::cpu();
    bool ours = true;
    try {
      d = from_dl_device(prototype->device);
    } catch (const UnsupportedOperationError&) {
      ours = false;
    }
    // A device's own code only: not the host memory a backend also names (pinned).
    XRT_CHECK(ours && DeviceManager::instance().dlpack_device_type(d) == kind, UnsupportedOperationError,
              "xpuruntime allocates DLPack tensors on kDLCPU or its devices' own codes only (device "
              "kinds of this build: ",
              kinds_text(), "), not device type ", kind);
    XRT_CHECK(prototype->ndim >= 0, InvalidArgumentError, "DLPack prototype has ndim ", prototype->ndim);
    Shape shape(prototype->shape, prototype->shape + prototype->ndim);
    Tensor t = Tensor::empty(shape, from_dl_dtype(prototype->dtype), d, current_native_stream(d));
    *out = to_managed_versioned(t, false);
    return 0;
  } catch (const OutOfMemoryError& e) {
    set_error(error_ctx, "MemoryError", e.what());
  } catch (const UnsupportedOperationError& e) {
    set_error(error_ctx, "TypeError", e.what());
  } catch (const InvalidArgumentError& e) {
    set_error(error_ctx, "ValueError", e.what());
  } catch (const std::exception& e) {
    set_error(error_ctx, "RuntimeError", e.what());
  }
  return -1;
}

int current_work_stream(DLDeviceType device_type, int32_t device_id, void** out_current_stream) {
  try {
    *out_current_stream = nullptr;
    std::optional<Device> d;
    try {
      d = DeviceManager::instance().device_from_dlpack(static_cast<int>(device_type), device_id);
    } catch (const UnsupportedOperationError&) {  // not a device of ours: no stream to name
    }
    if (d && !d->is_cpu()) *out_current_stream = current_native_stream(*d);
    return 0;
  } catch (...) {
    PyGILState_STATE gil = PyGILState_Ensure();  // callers need not hold the GIL
    set_python_error();
    PyGILState_Release(gil);
    return -1;
  }
}

const DLPackExchangeAPI kOurTable = {
    {{kDLPackMajor, kDLPackExchangeMinor}, nullptr},
    &allocate_managed,
    &export_managed,
    &import_managed,
    &export_borrowed,
    &current_work_stream,
};

// ---- lean Python protocol entry points ------------------------------------------------

struct KeywordNames {
  PyObject* stream;
  PyObject* max_version;
  PyObject* dl_device;
  PyObject* copy;
};
KeywordNames g_kw{};  // interned once in bind_dlpack_exchange, never released

// The slot a keyword fills: interned names compare by address, others by value.
PyObject** keyword_slot(PyObject* name, PyObject** slots) {
  const std::array<PyObject*, 4> names = {g_kw.stream, g_kw.max_version, g_kw.dl_device, g_kw.copy};
  for (std::size_t i = 0; i < names.size(); ++i)
    if (name == names[i]) return &slots[i];
  for (std::size_t i = 0; i < names.size(); ++i)
    if (PyUnicode_Compare(name, names[i]) == 0) return &slots[i];
  return nullptr;
}

// True when dl_device is None or names the tensor's own device.
bool same_device(PyObject* dl_device, const Device& d) {
  if (dl_device == Py_None) return true;
  if (!PyTuple_Check(dl_device) || PyTuple_GET_SIZE(dl_device) != 2) return false;
  const long type = PyLong_AsLong(PyTuple_GET_ITEM(dl_device, 0));
  const long id = PyLong_AsLong(PyTuple_GET_ITEM(dl_device, 1));
  if (PyErr_Occurred()) {
    PyErr_Clear();  // the general path reports it with its own message
    return false;
  }
  if (d.is_cpu()) return type == kDLCPU;
  return type == DeviceManager::instance().dlpack_device_type(d) && id == d.index;
}

// __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)
PyObject* dunder_dlpack(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  try {
    if (nargs != 0) {
      PyErr_SetString(PyExc_TypeError,
                      "__dlpack__() takes keyword arguments only (stream, max_version, dl_device, copy)");
      return nullptr;
    }
    std::array<PyObject*, 4> slots = {Py_None, Py_None, Py_None, Py_None};
    const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; ++i) {
      PyObject* name = PyTuple_GET_ITEM(kwnames, i);
      PyObject** slot = keyword_slot(name, slots.data());
      if (!slot) {
        PyErr_Format(PyExc_TypeError, "__dlpack__() got an unexpected keyword argument '%U'", name);
        return nullptr;
      }
      *slot = args[i];
    }
    auto [stream, max_version, dl_device, copy] = slots;
    const Tensor& t = tensor_of(self);
    const Device d = t.device();

    // The common case: no copy, no device change, a plain max_version and stream.
    bool fast = (copy == Py_None || copy == Py_False) && same_device(dl_device, d);
    long major = 0;
    if (fast && max_version != Py_None) {
      fast = PyTuple_Check(max_version) && PyTuple_GET_SIZE(max_version) == 2 &&
             PyLong_CheckExact(PyTuple_GET_ITEM(max_version, 0));
      if (fast) major = PyLong_AsLong(PyTuple_GET_ITEM(max_version, 0));
      if (PyErr_Occurred()) return nullptr;
    }
    NativeStream consumer = nullptr;
    bool order = false;
    if (fast && stream != Py_None) {
      fast = PyLong_CheckExact(stream);
      if (fast) {
        const long long value = PyLong_AsLongLong(stream);
        if (value == -1 && PyErr_Occurred()) return nullptr;
        // CPU: only -1 is allowed; a device: 0 is disallowed. The general path says why.
        fast = value == -1 || (!d.is_cpu() && value != 0);
        order = !d.is_cpu() && value != -1;
        consumer = value == 1 ? nullptr : reinterpret_cast<NativeStream>(static_cast<intptr_t>(value));
      }
    }
    if (!fast) {
      auto borrow = [](PyObject* o) { return py::reinterpret_borrow<py::object>(o); };
      return tensor_dlpack(t, borrow(stream), borrow(max_version), borrow(dl_device), borrow(copy))
          .release()
          .ptr();
    }
    if (order) order_streams(d, current_native_stream(d), consumer);
    count_dlpack(DLPackRoute::kExportDunderFast);
    return tensor_to_capsule(t, major >= 1, false).release().ptr();
  } catch (...) {
    set_python_error();
    return nullptr;
  }
}

PyObject* dunder_dlpack_device(PyObject* self, PyObject* /*unused*/) {
  try {
    const Device d = tensor_of(self).device();
    return d.is_cpu() ? Py_BuildValue("(ii)", int(kDLCPU), 0)
                      : Py_BuildValue("(ii)", DeviceManager::instance().dlpack_device_type(d), d.index);
  } catch (...) {
    set_python_error();
    return nullptr;
  }
}

PyObject* from_dlpack_function(PyObject* /*module*/, PyObject* obj) {
  try {
    return py::cast(tensor_from_python(obj)).release().ptr();
  } catch (...) {
    set_python_error();
    return nullptr;
  }
}

// torch's table, looked up once (nullptr when this torch has none).
const DLPackExchangeAPI* torch_table() {
  static bool looked_up = false;
  static const DLPackExchangeAPI* table = nullptr;
  if (!looked_up) {
    py::module_ torch;
    try {
      torch = py::module_::import("torch");
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_ImportError)) throw;
      XRT_THROW(BackendUnavailableError, "Tensor.to_torch() needs PyTorch: pip install torch");
    }
    const DLPackExchangeAPI* api =
        exchange_table_of(reinterpret_cast<PyTypeObject*>(torch.attr("Tensor").ptr()));
    table = api && api->managed_tensor_to_py_object_no_sync ? api : nullptr;
    looked_up = true;
  }
  return table;
}

PyObject* to_torch_method(PyObject* self, PyObject* /*unused*/) {
  try {
    const DLPackExchangeAPI* api = torch_table();
    if (!api) {  // an older torch: the Python protocol does the same, slower
      return py::module_::import("torch").attr("from_dlpack")(py::handle(self)).release().ptr();
    }
    const Tensor& t = tensor_of(self);
    if (!t.device().is_cpu()) {  // torch's current stream waits for ours
      void* theirs = nullptr;
      const auto code = static_cast<DLDeviceType>(DeviceManager::instance().dlpack_device_type(t.device()));
      if (api->current_work_stream(code, t.device().index, &theirs) != 0)
        throw_python_error("torch's current_work_stream");
      order_streams(t.device(), current_native_stream(t.device()), theirs);
    }
    void* out = nullptr;
    // torch owns the managed tensor from this call on, whether it succeeds or not.
    if (api->managed_tensor_to_py_object_no_sync(to_managed_versioned(t, false), &out) != 0)
      throw_python_error("torch's managed_tensor_to_py_object_no_sync");
    count_dlpack(DLPackRoute::kToTorch);
    return static_cast<PyObject*>(out);
  } catch (...) {
    set_python_error();
    return nullptr;
  }
}

// Method tables must outlive the type: static storage.
PyMethodDef g_dlpack_def = {
    "__dlpack__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&dunder_dlpack)),
    METH_FASTCALL | METH_KEYWORDS,
    "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
    "A DLPack capsule viewing this tensor (array API protocol). `stream` is the consumer's "
    "stream (CUDA: our current stream's work is ordered before it); max_version >= (1, 0) "
    "gives a versioned capsule; `dl_device`/`copy` ask for a copy on another device."};
PyMethodDef g_dlpack_device_def = {"__dlpack_device__", &dunder_dlpack_device, METH_NOARGS,
                                   "__dlpack_device__($self, /)\n--\n\n(DLPack device type, device id)."};
PyMethodDef g_to_torch_def = {
    "to_torch", &to_torch_method, METH_NOARGS,
    "to_torch($self, /)\n--\n\nA torch.Tensor sharing this tensor's memory (zero-copy), made "
    "through torch's DLPack C exchange API; torch's current CUDA stream waits for ours."};
PyMethodDef g_from_dlpack_def = {
    "from_dlpack", &from_dlpack_function, METH_O,
    "from_dlpack(obj, /)\n--\n\nZero-copy import of anything with __dlpack__ (through its "
    "type's C exchange API when it has one, e.g. torch), a DLPack capsule or a numpy array."};

void set_attr(py::handle owner, const char* name, PyObject* value) {
  if (!value) throw py::error_already_set();
  py::object owned = py::reinterpret_steal<py::object>(value);
  if (PyObject_SetAttrString(owner.ptr(), name, owned.ptr()) != 0) throw py::error_already_set();
}

}  // namespace

void count_dlpack(DLPackRoute r) noexcept {
  g_route_counts[static_cast<std::size_t>(r)].fetch_add(1, std::memory_order_relaxed);
}

void order_streams(const Device& d, NativeStream producer, NativeStream consumer) {
  if (producer == consumer || d.is_cpu()) return;
  // One reusable event per device and thread: a wait takes the event's state when it
  // is enqueued, so recording the event again later leaves earlier waits intact.
  thread_local std::vector<std::unique_ptr<Event>> events;
  const auto index = static_cast<std::size_t>(d.index);
  if (events.size() <= index) events.resize(index + 1);
  if (!events[index]) events[index] = std::make_unique<Event>(d, /*enable_timing=*/false);
  events[index]->record(*Stream::wrap(d, producer));
  events[index]->wait(*Stream::wrap(d, consumer));
  count_dlpack(DLPackRoute::kStreamWait);
}

bool try_import_via_exchange_api(const py::handle& obj, Tensor* out) {
  const DLPackExchangeAPI* api = exchange_table_of(Py_TYPE(obj.ptr()));
  if (!api) return false;
  DLManagedTensorVersioned* m = nullptr;
  if (api->managed_tensor_from_py_object_no_sync(obj.ptr(), &m) != 0 || !m)
    throw_python_error("the producer's managed_tensor_from_py_object_no_sync");
  const DLDevice where = m->dl_tensor.device;  // read before adopt_versioned owns m
  Tensor t = adopt_versioned(m);
  // Device memory under the device's own code: our current stream waits for the producer's.
  if (!t.device().is_cpu() &&
      static_cast<int>(where.device_type) == DeviceManager::instance().dlpack_device_type(t.device())) {
    void* theirs = nullptr;
    if (api->current_work_stream(where.device_type, where.device_id, &theirs) != 0)
      throw_python_error("the producer's current_work_stream");
    order_streams(t.device(), theirs, current_native_stream(t.device()));
  }
  count_dlpack(DLPackRoute::kImportExchangeApi);
  *out = std::move(t);
  return true;
}

void bind_dlpack_exchange(py::module_& m) {
  g_kw = {PyUnicode_InternFromString("stream"), PyUnicode_InternFromString("max_version"),
          PyUnicode_InternFromString("dl_device"), PyUnicode_InternFromString("copy")};
  py::handle cls = m.attr("Tensor");
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  set_attr(cls, "__dlpack__", PyDescr_NewMethod(type, &g_dlpack_def));
  set_attr(cls, "__dlpack_device__", PyDescr_NewMethod(type, &g_dlpack_device_def));
  set_attr(cls, "to_torch", PyDescr_NewMethod(type, &g_to_torch_def));
  set_attr(cls, kDLPackExchangeAttr,
           PyCapsule_New(const_cast<DLPackExchangeAPI*>(&kOurTable), kDLPackExchangeCapsuleName, nullptr));
  set_attr(m, "from_dlpack", PyCFunction_NewEx(&g_from_dlpack_def, nullptr, m.attr("__name__").ptr()));

  m.def(
      "_dlpack_stats",
      [](bool reset) {
        py::dict out;
        for (std::size_t i = 0; i < kRoutes; ++i)
          out[kRouteNames[i]] = reset ? g_route_counts[i].exchange(0) : g_route_counts[i].load();
        return out;
      },
      py::arg("reset") = false,
      "How many DLPack calls took each path since start (or the last reset=True): "
      "import_exchange_api/import_dunder/import_capsule, export_dunder_fast/"
      "export_dunder_general/export_exchange_api, to_torch, stream_waits.");
}

}  // namespace xpuruntime::bindings
