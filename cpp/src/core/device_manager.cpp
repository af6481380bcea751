// DeviceManager: a registry of device backends keyed by device kind. Each backend
// comes from the plugin serving its kind (plugin.h: the CPU one built in, the others
// dlopen'ed on first use); the manager itself names no device kind.
#include <array>
#include <atomic>
#include <optional>
#include <string>

#include "core/no_destructor.h"
#include "xpuruntime/backend.h"
#include "xpuruntime/device.h"
#include "xpuruntime/error.h"
#include "xpuruntime/plugin.h"
#include "xpuruntime/profiler.h"

namespace xpuruntime {
namespace {

// The backend of a device kind, or nullptr with *why (plugin absent or failed, no device).
DeviceBackend* usable_backend(DeviceKind kind, std::string* why) {
  std::string reason;
  DeviceBackend* b = plugin_backend(plugin_for_device(kind), &reason);
  if (b != nullptr && b->device_count() == 0) {
    if (reason.empty()) reason = b->unavailable_reason();
    if (reason.empty()) reason = "no " + std::string(kind.name()) + " device found";
    b = nullptr;
  }
  if (why != nullptr) *why = reason;
  return b;
}

thread_local bool t_has_current = false;
thread_local Device t_current = Device::cpu();

}  // namespace

Device Device::parse(std::string_view s) {
  std::string str(s);
  auto colon = str.find(':');
  std::string kind = str.substr(0, colon);
  int index = 0;
  const DeviceKind accel = DeviceKind::accelerator();
  if (colon != std::string::npos) {
    std::string idx = str.substr(colon + 1);
    bool digits = !idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos;
    XRT_CHECK(digits && idx.size() < 6, InvalidArgumentError, "invalid device string '", str,
              "': the index after ':' must be a non-negative integer (e.g. '", accel.name(), ":0')");
    index = std::stoi(idx);
  }
  std::optional<DeviceKind> k;
  try {
    k = DeviceKind::named(kind);
  } catch (const InvalidArgumentError&) {
    std::string expected = "'cpu'";
    for (DeviceKind d : DeviceKind::all()) {
      if (!d.is_cpu()) expected += ", '" + std::string(d.name()) + "' or '" + std::string(d.name()) + ":N'";
    }
    XRT_THROW(InvalidArgumentError, "unknown device '", str, "'; expected ", expected,
              " (NPUs are reached through engines: InferenceSession(device='npu'))");
  }
  if (k->is_cpu()) {
    XRT_CHECK(index == 0, InvalidArgumentError, "invalid device '", str, "': the CPU is 'cpu' or 'cpu:0'");
  }
  return Device{*k, index};
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : std::string(kind.name()) + ":" + std::to_string(index);
}

DeviceManager::DeviceManager() = default;

DeviceManager& DeviceManager::instance() {
  static NoDestructor<DeviceManager> mgr;
  // The built-in plugin starts with the manager (its kernels and provider register).
  // Not in the constructor: the plugin's registration may call instance() again.
  static std::atomic<bool> builtin_loaded{false};
  if (!builtin_loaded.load(std::memory_order_acquire)) {
    load_plugin(plugin_for_device(DeviceKind::cpu()));
    builtin_loaded.store(true, std::memory_order_release);
  }
  return mgr.get();
}

DeviceBackend* DeviceManager::backend_or_null(DeviceKind kind) const {
  return usable_backend(kind, nullptr);
}

DeviceBackend& DeviceManager::backend(DeviceKind kind) const {
  std::string reason;
  DeviceBackend* b = usable_backend(kind, &reason);
  XRT_CHECK(b != nullptr, BackendUnavailableError, kind.name(), " is not available: ", reason);
  return *b;
}

std::string DeviceManager::unavailable_reason(DeviceKind kind) const {
  std::string reason;
  usable_backend(kind, &reason);
  return reason;
}

std::string DeviceManager::accelerator_unavailable_reason() const {
  return unavailable_reason(DeviceKind::accelerator());
}

int DeviceManager::get_device_count() const { return get_device_count(DeviceKind::accelerator()); }

int DeviceManager::get_device_count(DeviceKind kind) const {
  DeviceBackend* b = plugin_backend(plugin_for_device(kind), nullptr);
  return b ? b->device_count() : 0;
}

std::vector<DeviceInfo> DeviceManager::get_all_devices() const {
  std::vector<DeviceInfo> out;
  for (DeviceKind kind : DeviceKind::all()) {
    const int n = get_device_count(kind);
    for (int i = 0; i < n; ++i) out.push_back(backend(kind).device_info(i));
  }
  return out;
}

void DeviceManager::check_device(const Device& d) const {
  const int n = get_device_count(d.kind);
  if (n == 0) {
    XRT_THROW(InvalidArgumentError, "device ", d.str(), " requested but ", unavailable_reason(d.kind));
  }
  XRT_CHECK(d.index >= 0 && d.index < n, InvalidArgumentError, "device ", d.str(),
            " does not exist: this machine has ", n, " ", d.kind.name(), " device(s) (",
            Device{d.kind, 0}.str(), "..", Device{d.kind, n - 1}.str(), ")");
}

DeviceInfo DeviceManager::get_device_info(int device_id) const {
  return get_device_info(Device{DeviceKind::accelerator(), device_id});
}

DeviceInfo DeviceManager::get_device_info(const Device& d) const {
  check_device(d);
  return backend(d.kind).device_info(d.index);
}

Device DeviceManager::get_current_device() const {
  if (t_has_current) return t_current;
  const DeviceKind accel = DeviceKind::accelerator();
  return get_device_count(accel) > 0 ? Device{accel, backend(accel).current()} : Device::cpu();
}

void DeviceManager::set_current_device(int device_id) {
  set_current_device(Device{DeviceKind::accelerator(), device_id});
}

void DeviceManager::set_current_device(const Device& d) {
  check_device(d);
  backend(d.kind).set_current(d.index);
  t_current = d;
  t_has_current = true;
}

void DeviceManager::synchronize(int device_id) const {
  if (device_id < 0) {
    synchronize(get_current_device());
  } else {
    synchronize(Device{DeviceKind::accelerator(), device_id});
  }
}

void DeviceManager::synchronize(const Device& d) const {
  check_device(d);
  backend(d.kind).synchronize_device(d.index);
  if (Profiler::instance().enabled()) Profiler::instance().record_sync("device");
}

Device DeviceManager::device_from_dlpack(int dl_device_type, int dl_device_id) const {
  if (dl_device_type == kDLPackCPU) return Device::cpu();
  std::string supported = "cpu (" + std::to_string(kDLPackCPU) + ")";
  for (DeviceKind kind : DeviceKind::all()) {
    if (kind.is_cpu()) continue;
    // The plugin's backend, with or without devices: the codes are its, either way.
    DeviceBackend* b = plugin_backend(plugin_for_device(kind), nullptr);
    if (b == nullptr) continue;
    switch (b->dlpack_role(dl_device_type)) {
      case DeviceBackend::DLPackRole::kDevice: return Device{kind, dl_device_id};
      case DeviceBackend::DLPackRole::kHost: return Device::cpu();
      case DeviceBackend::DLPackRole::kNone: break;
    }
    supported += ", " + std::string(kind.name()) + " (" + std::to_string(b->dlpack_device_type()) + ")";
  }
  XRT_THROW(UnsupportedOperationError, "DLPack device type ", dl_device_type, " is not supported (",
            supported, " are)");
}

int DeviceManager::dlpack_device_type(const Device& d) const {
  if (d.is_cpu()) return kDLPackCPU;
  // Asked per DLPack export: each kind's code is read once. 0 = unread.
  static std::array<std::atomic<int>, 256> codes{};
  int code = codes[d.kind.id()].load(std::memory_order_relaxed);
  if (code == 0) {
    std::string why;
    DeviceBackend* b = plugin_backend(plugin_for_device(d.kind), &why);
    XRT_CHECK(b != nullptr, BackendUnavailableError, d.kind.name(), " is not available: ", why);
    code = b->dlpack_device_type();
    codes[d.kind.id()].store(code, std::memory_order_relaxed);
  }
  return code;
}

}  // namespace xpuruntime
