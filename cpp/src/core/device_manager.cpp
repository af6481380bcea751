// DeviceManager: a registry of device backends keyed by device type. Each backend
// comes from the plugin serving its type (plugin.h: the CPU one built in, the others
// dlopen'ed on first use); the manager itself names no device kind.
#include <atomic>
#include <string>

#include "core/no_destructor.h"
#include "xpuruntime/backend.h"
#include "xpuruntime/device.h"
#include "xpuruntime/error.h"
#include "xpuruntime/plugin.h"
#include "xpuruntime/profiler.h"

namespace xpuruntime {
namespace {

// The seed API's integer device ids (get_device_count(), get_device_info(int), ...)
// name devices of this type.
constexpr DeviceType kAcceleratorType = DeviceType::kCUDA;

// The backend of a device type, or nullptr with *why (plugin absent or failed, no device).
DeviceBackend* usable_backend(DeviceType type, std::string* why) {
  std::string reason;
  DeviceBackend* b = plugin_backend(plugin_for_device(type), &reason);
  if (b != nullptr && b->device_count() == 0) {
    if (reason.empty()) reason = b->unavailable_reason();
    if (reason.empty()) reason = "no " + std::string(device_type_name(type)) + " device found";
    b = nullptr;
  }
  if (why != nullptr) *why = reason;
  return b;
}

thread_local bool t_has_current = false;
thread_local Device t_current = Device::cpu();

}  // namespace

std::string_view device_type_name(DeviceType t) {
  return t == DeviceType::kCUDA ? "cuda" : "cpu";
}

Device Device::parse(std::string_view s) {
  std::string str(s);
  auto colon = str.find(':');
  std::string kind = str.substr(0, colon);
  int index = 0;
  if (colon != std::string::npos) {
    std::string idx = str.substr(colon + 1);
    bool digits = !idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos;
    XRT_CHECK(digits && idx.size() < 6, InvalidArgumentError, "invalid device string '", str,
              "': the index after ':' must be a non-negative integer (e.g. 'cuda:0')");
    index = std::stoi(idx);
  }
  if (kind == "cpu") {
    XRT_CHECK(index == 0, InvalidArgumentError, "invalid device '", str, "': the CPU is 'cpu' or 'cpu:0'");
    return Device::cpu();
  }
  if (kind == "cuda" || kind == "gpu") return Device::cuda(index);
  XRT_THROW(InvalidArgumentError, "unknown device '", str,
            "'; expected 'cpu', 'cuda' or 'cuda:N' (NPUs are reached through engines: "
            "InferenceSession(device='npu'))");
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

DeviceManager::DeviceManager() = default;

DeviceManager& DeviceManager::instance() {
  static NoDestructor<DeviceManager> mgr;
  // The built-in plugin starts with the manager (its kernels and provider register).
  // Not in the constructor: the plugin's registration may call instance() again.
  static std::atomic<bool> builtin_loaded{false};
  if (!builtin_loaded.load(std::memory_order_acquire)) {
    load_plugin(plugin_for_device(DeviceType::kCPU));
    builtin_loaded.store(true, std::memory_order_release);
  }
  return mgr.get();
}

DeviceBackend* DeviceManager::backend_or_null(DeviceType type) const {
  return usable_backend(type, nullptr);
}

DeviceBackend& DeviceManager::backend(DeviceType type) const {
  std::string reason;
  DeviceBackend* b = usable_backend(type, &reason);
  XRT_CHECK(b != nullptr, BackendUnavailableError, device_type_name(type), " is not available: ", reason);
  return *b;
}

std::string DeviceManager::unavailable_reason(DeviceType type) const {
  std::string reason;
  usable_backend(type, &reason);
  return reason;
}

std::string DeviceManager::cuda_unavailable_reason() const { return unavailable_reason(DeviceType::kCUDA); }

int DeviceManager::get_device_count() const { return get_device_count(kAcceleratorType); }

int DeviceManager::get_device_count(DeviceType type) const {
  DeviceBackend* b = plugin_backend(plugin_for_device(type), nullptr);
  return b ? b->device_count() : 0;
}

std::vector<DeviceInfo> DeviceManager::get_all_devices() const {
  std::vector<DeviceInfo> out;
  for (DeviceType type : plugin_device_types()) {
    const int n = get_device_count(type);
    for (int i = 0; i < n; ++i) out.push_back(backend(type).device_info(i));
  }
  return out;
}

void DeviceManager::check_device(const Device& d) const {
  const int n = get_device_count(d.type);
  if (n == 0) {
    XRT_THROW(InvalidArgumentError, "device ", d.str(), " requested but ", unavailable_reason(d.type));
  }
  XRT_CHECK(d.index >= 0 && d.index < n, InvalidArgumentError, "device ", d.str(),
            " does not exist: this machine has ", n, " ", device_type_name(d.type), " device(s) (",
            Device{d.type, 0}.str(), "..", Device{d.type, n - 1}.str(), ")");
}

DeviceInfo DeviceManager::get_device_info(int device_id) const {
  return get_device_info(Device{kAcceleratorType, device_id});
}

DeviceInfo DeviceManager::get_device_info(const Device& d) const {
  check_device(d);
  return backend(d.type).device_info(d.index);
}

Device DeviceManager::get_current_device() const {
  if (t_has_current) return t_current;
  return get_device_count(kAcceleratorType) > 0 ? Device{kAcceleratorType, backend(kAcceleratorType).current()}
                                                : Device::cpu();
}

void DeviceManager::set_current_device(int device_id) {
  set_current_device(Device{kAcceleratorType, device_id});
}

void DeviceManager::set_current_device(const Device& d) {
  check_device(d);
  backend(d.type).set_current(d.index);
  t_current = d;
  t_has_current = true;
}

void DeviceManager::synchronize(int device_id) const {
  if (device_id < 0) {
    synchronize(get_current_device());
  } else {
    synchronize(Device{kAcceleratorType, device_id});
  }
}

void DeviceManager::synchronize(const Device& d) const {
  check_device(d);
  backend(d.type).synchronize_device(d.index);
  if (Profiler::instance().enabled()) Profiler::instance().record_sync("device");
}

}  // namespace xpuruntime
