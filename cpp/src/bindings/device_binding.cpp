#include <pybind11/stl.h>

#include <cstdint>

#include "bindings/bindings.h"
#include "xpuruntime/backend.h"
#include "xpuruntime/device.h"
#include "xpuruntime/plugin.h"

namespace xpuruntime::bindings {

void bind_device(py::module_& m) {
  // The device kinds of this build's plugin table, accelerators first ("cuda", "cpu").
  m.def("device_kinds", [] {
    std::vector<std::string> out;
    for (DeviceKind k : DeviceKind::all()) out.emplace_back(k.name());
    return out;
  });
  // The kind the seed API's integer device ids name (the table's first line).
  m.def("accelerator_kind", [] { return std::string(DeviceKind::accelerator().name()); });

  py::class_<Device>(m, "DeviceSpec")
      .def(py::init([](const std::string& s) { return Device::parse(s); }), py::arg("device"))
      .def_property_readonly("type", [](const Device& d) { return std::string(d.kind.name()); })
      .def_readonly("index", &Device::index)
      .def("__str__", &Device::str)
      .def("__repr__", [](const Device& d) { return "DeviceSpec('" + d.str() + "')"; })
      .def("__eq__", [](const Device& a, const Device& b) { return a == b; })
      .def("__hash__", [](const Device& d) { return static_cast<int>(d.kind.id()) * 1000 + d.index; });

  py::class_<DeviceInfo>(m, "DeviceInfo")
      .def_readonly("device_id", &DeviceInfo::device_id)
      .def_property_readonly("device_type",
                             [](const DeviceInfo& i) { return std::string(i.device_type.name()); })
      .def_readonly("name", &DeviceInfo::name)
      .def_readonly("total_memory", &DeviceInfo::total_memory)
      .def_readonly("free_memory", &DeviceInfo::free_memory)
      .def_readonly("compute_capability_major", &DeviceInfo::compute_capability_major)
      .def_readonly("compute_capability_minor", &DeviceInfo::compute_capability_minor)
      .def_readonly("sm_count", &DeviceInfo::sm_count)
      .def_readonly("supports_fp16", &DeviceInfo::supports_fp16)
      .def_readonly("supports_bf16", &DeviceInfo::supports_bf16)
      .def_readonly("supports_int8", &DeviceInfo::supports_int8)
      .def_readonly("driver_version", &DeviceInfo::driver_version)
      .def_readonly("runtime_version", &DeviceInfo::runtime_version)
      .def_readonly("pci_bus_id", &DeviceInfo::pci_bus_id)
      .def("__repr__", [](const DeviceInfo& info) {
        return "<DeviceInfo: " + std::string(info.device_type.name()) + ":" +
               std::to_string(info.device_id) + " " + info.name + " (" +
               std::to_string(info.total_memory / (1024ull * 1024 * 1024)) + " GB)>";
      });

  // Seed 004 §3.1: a singleton whose lifetime Python never manages.
  py::class_<DeviceManager, std::unique_ptr<DeviceManager, py::nodelete>>(m, "DeviceManager")
      .def_static("instance", &DeviceManager::instance, py::return_value_policy::reference)
      .def("get_device_count", py::overload_cast<>(&DeviceManager::get_device_count, py::const_))
      .def(
          "get_device_count_of",
          [](const DeviceManager& dm, const std::string& kind) {
            return dm.get_device_count(DeviceKind::named(kind));
          },
          py::arg("kind"))
      .def("get_all_devices", &DeviceManager::get_all_devices)
      .def("get_device_info", py::overload_cast<int>(&DeviceManager::get_device_info, py::const_),
           py::arg("device_id"))
      .def("get_device_info_for",
           [](const DeviceManager& dm, const std::string& d) { return dm.get_device_info(Device::parse(d)); })
      .def("get_current_device", [](const DeviceManager& dm) { return dm.get_current_device().str(); })
      .def("set_current_device", py::overload_cast<int>(&DeviceManager::set_current_device),
           py::arg("device_id"))
      .def("set_current_device_spec",
           [](DeviceManager& dm, const std::string& d) { dm.set_current_device(Device::parse(d)); })
      .def("synchronize",
           [](const DeviceManager& dm, int device_id) {
             py::gil_scoped_release release;
             dm.synchronize(device_id);
           },
           py::arg("device_id") = -1)
      .def("synchronize_spec",
           [](const DeviceManager& dm, const std::string& d) {
             Device dev = Device::parse(d);
             py::gil_scoped_release release;
             dm.synchronize(dev);
           })
      .def("cuda_unavailable_reason", &DeviceManager::accelerator_unavailable_reason)
      .def("accelerator_unavailable_reason", &DeviceManager::accelerator_unavailable_reason)
      .def(
          "unavailable_reason",
          [](const DeviceManager& dm, const std::string& kind) {
            return dm.unavailable_reason(DeviceKind::named(kind));
          },
          py::arg("kind"))
      .def(
          "attribute",
          [](const DeviceManager& dm, const std::string& device, const std::string& key) {
            const Device d = Device::parse(device);
            dm.check_device(d);
            return dm.backend(d.kind).attribute(d.index, key);
          },
          py::arg("device"), py::arg("key"));

  m.def(
      "plugin_lookup",
      [](const std::string& plugin, const std::string& name) {
        return reinterpret_cast<std::uintptr_t>(plugin_lookup(plugin, name.c_str()));
      },
      py::arg("plugin"), py::arg("name"),
      "The address of a plugin's named entry point (names in xpuruntime/cuda_kernels_abi.h), "
      "or 0 when the plugin is absent or has no such entry. For ctypes callers (tests).");

  m.def(
      "torch_allocator_library",
      [] { return core_library_dir() + "/libxpuruntime_torch_allocator.so"; },
      "The library holding xrt_torch_malloc / xrt_torch_free for "
      "torch.cuda.memory.CUDAPluggableAllocator (built with the CUDA plugin).");

  m.def("plugin_statuses", [] {
    py::list out;
    for (const auto& s : plugin_statuses())
      out.append(py::dict(py::arg("name") = s.name, py::arg("path") = s.path,
                          py::arg("loaded") = s.loaded, py::arg("error") = s.error));
    return out;
  });
}

}  // namespace xpuruntime::bindings
