#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "xpuruntime/checked.h"
#include "xpuruntime/error.h"
#include "xpuruntime/memory.h"
#include "xpuruntime/stream.h"

namespace xpuruntime::bindings {
namespace {
CachingAllocator& alloc_of(const std::string& device) {
  return MemoryManager::instance().allocator(Device::parse(device));
}
NativeStream stream_arg(const std::string& device, py::object stream) {
  if (stream.is_none()) {
    Device d = Device::parse(device);
    return !d.is_cpu() ? StreamManager::instance().current_stream(d)->native() : nullptr;
  }
  return reinterpret_cast<NativeStream>(stream.cast<uintptr_t>());
}
// A byte count from Python: InvalidArgumentError for a non-int or a negative value,
// OutOfMemoryError past 2**64-1 (no device holds that), never pybind11's TypeError.
std::size_t bytes_arg(const py::handle& v, const char* what) {
  XRT_CHECK(py::isinstance<py::int_>(v) && !py::isinstance<py::bool_>(v), InvalidArgumentError,
            what, " must be an int (a number of bytes), got ",
            std::string(py::str(py::type::handle_of(v).attr("__name__"))));
  XRT_CHECK(v.cast<py::int_>() >= py::int_(0), InvalidArgumentError, what,
            " must be >= 0, got a negative number");
  unsigned long long n = PyLong_AsUnsignedLongLong(v.ptr());
  if (n == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    XRT_THROW(OutOfMemoryError, what, " is more than 2**64-1 bytes; no device holds that much");
  }
  return static_cast<std::size_t>(n);
}
}  // namespace

void bind_memory(py::module_& m) {
  py::class_<MemoryStats>(m, "MemoryStats")
      .def_readonly("allocated_bytes", &MemoryStats::allocated_bytes)
      .def_readonly("requested_bytes", &MemoryStats::requested_bytes)
      .def_readonly("reserved_bytes", &MemoryStats::reserved_bytes)
      .def_readonly("peak_allocated_bytes", &MemoryStats::peak_allocated_bytes)
      .def_readonly("peak_reserved_bytes", &MemoryStats::peak_reserved_bytes)
      .def_readonly("num_allocs", &MemoryStats::num_allocs)
      .def_readonly("num_frees", &MemoryStats::num_frees)
      .def_readonly("num_cache_hits", &MemoryStats::num_cache_hits)
      .def_readonly("num_cache_misses", &MemoryStats::num_cache_misses)
      .def_readonly("num_device_allocs", &MemoryStats::num_device_allocs)
      .def_readonly("num_device_frees", &MemoryStats::num_device_frees)
      .def_readonly("num_ooms", &MemoryStats::num_ooms)
      .def_readonly("memory_limit", &MemoryStats::memory_limit)
      .def("__repr__", [](const MemoryStats& s) { return "<MemoryStats: " + s.str() + ">"; });

  auto mem = m.def_submodule("memory", "Caching allocator per device, pinned host memory.");
  mem.def("stats", [](const std::string& d) { return alloc_of(d).stats(); }, py::arg("device") = "cpu");
  mem.def("empty_cache", [](const std::string& d) {
    py::gil_scoped_release release;
    alloc_of(d).empty_cache();
  }, py::arg("device") = "cpu");
  mem.def("reset_peak_stats", [](const std::string& d) { alloc_of(d).reset_peak_stats(); },
          py::arg("device") = "cpu");
  mem.def("set_memory_limit",
          [](const std::string& d, const py::object& bytes) {
            alloc_of(d).set_memory_limit(bytes_arg(bytes, "limit_bytes"));
          },
          py::arg("device"), py::arg("limit_bytes"));
  // Raw block interface (what torch's CUDAPluggableAllocator and benchmarks use).
  mem.def("raw_alloc",
          [](const py::object& nbytes, const std::string& d, py::object stream) {
            std::size_t bytes = bytes_arg(nbytes, "raw_alloc nbytes");
            return reinterpret_cast<uintptr_t>(alloc_of(d).allocate(bytes, stream_arg(d, stream)));
          },
          py::arg("nbytes"), py::arg("device") = "cpu", py::arg("stream") = py::none());
  mem.def("raw_free", [](uintptr_t ptr, const std::string& d) { alloc_of(d).free(reinterpret_cast<void*>(ptr)); },
          py::arg("ptr"), py::arg("device") = "cpu");
  mem.def("record_stream",
          [](uintptr_t ptr, const std::string& d, uintptr_t stream) {
            alloc_of(d).record_stream(reinterpret_cast<void*>(ptr), reinterpret_cast<NativeStream>(stream));
          },
          py::arg("ptr"), py::arg("device"), py::arg("stream"));
  mem.def("round_size_class",
          [](const py::object& n) { return round_size_class(bytes_arg(n, "nbytes")); },
          py::arg("nbytes"));
  mem.def("allocate_pinned",
          [](const py::object& nbytes) {
            std::size_t bytes = bytes_arg(nbytes, "allocate_pinned nbytes");
            return reinterpret_cast<uintptr_t>(MemoryManager::instance().allocate_pinned(bytes));
          },
          py::arg("nbytes"));
  mem.def("free_pinned",
          [](uintptr_t p) { MemoryManager::instance().free_pinned_checked(reinterpret_cast<void*>(p)); },
          py::arg("ptr"));
}

}  // namespace xpuruntime::bindings
