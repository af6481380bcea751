// Devices: what exists on this machine and which one is current.
// DeviceManager is a process-wide singleton; all methods are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace xpuruntime {

template <typename T>
class NoDestructor;

// A device kind ("cpu", "cuda", "null", ...), interned from the core's plugin table
// (core/plugin.cpp): the kinds are the plugins this core knows, so the core names no
// vendor. A cheap value type; the CPU is always kind 0, and the default.
class DeviceKind {
 public:
  constexpr DeviceKind() = default;
  static constexpr DeviceKind cpu() { return DeviceKind(); }
  // The kind the plugin table names `name` (or one of its aliases, e.g. "gpu");
  // throws InvalidArgumentError listing the known kinds.
  static DeviceKind named(std::string_view name);
  // Every kind some plugin serves, in the table's order (accelerators first).
  static std::vector<DeviceKind> all();
  // The kind the seed API's integer device ids name (get_device_count(),
  // get_device_info(int)): the plugin table's first entry.
  static DeviceKind accelerator();
  std::string_view name() const;
  constexpr uint8_t id() const { return id_; }
  constexpr bool is_cpu() const { return id_ == 0; }
  friend constexpr bool operator==(DeviceKind a, DeviceKind b) { return a.id_ == b.id_; }
  friend constexpr bool operator!=(DeviceKind a, DeviceKind b) { return a.id_ != b.id_; }
  friend constexpr bool operator<(DeviceKind a, DeviceKind b) { return a.id_ < b.id_; }

 private:
  friend struct DeviceKindTable;  // core/plugin.cpp interns the kinds
  constexpr explicit DeviceKind(uint8_t id) : id_(id) {}
  uint8_t id_ = 0;
};

// A device kind plus an index ("cpu", "cuda:0"). Cheap value type.
struct Device {
  DeviceKind kind;
  int index = 0;

  static Device cpu() { return {DeviceKind::cpu(), 0}; }
  // Parses "<kind>" or "<kind>:N" for the kinds of the plugin table (and their
  // aliases, "gpu" for the first accelerator); throws InvalidArgumentError otherwise.
  static Device parse(std::string_view s);
  std::string str() const;  // "cpu", "<kind>:N"
  bool is_cpu() const { return kind.is_cpu(); }
  friend bool operator==(const Device& a, const Device& b) {
    return a.kind == b.kind && a.index == b.index;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

// The fields of seed 004 §3.1 plus the device type and a few that users ask for.
struct DeviceInfo {
  int device_id = 0;
  DeviceKind device_type;
  std::string name;
  std::size_t total_memory = 0;
  std::size_t free_memory = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int sm_count = 0;  // accelerators: multiprocessors; CPU: logical cores
  bool supports_fp16 = false;
  bool supports_bf16 = false;
  bool supports_int8 = false;
  std::string driver_version;   // the vendor driver's version ("13.0"); empty on CPU
  std::string runtime_version;  // the vendor runtime's version ("13.0"); empty on CPU
  std::string pci_bus_id;       // PCI devices only
};

class DeviceBackend;

// A registry of device backends keyed by device kind: each comes from the plugin
// serving that kind (plugin.h), loaded on first use.
class DeviceManager {
 public:
  static DeviceManager& instance();

  // Number of devices of DeviceKind::accelerator() (seed semantics); 0 without one.
  int get_device_count() const;
  int get_device_count(DeviceKind kind) const;
  // Devices of every kind in the plugin table's order (accelerators first), the CPU last.
  std::vector<DeviceInfo> get_all_devices() const;
  DeviceInfo get_device_info(int device_id) const;  // accelerator device by index
  DeviceInfo get_device_info(const Device& d) const;
  // The current device of the calling thread (the accelerator's if any, else CPU).
  Device get_current_device() const;
  void set_current_device(int device_id);
  void set_current_device(const Device& d);
  // Waits for all work on the device; device_id -1 means the current device.
  void synchronize(int device_id = -1) const;
  void synchronize(const Device& d) const;

  // Why a device kind reports no devices ("" when it is usable).
  std::string unavailable_reason(DeviceKind kind) const;
  std::string accelerator_unavailable_reason() const;  // of DeviceKind::accelerator()
  // The backend of a device kind; throws BackendUnavailableError with the reason.
  DeviceBackend& backend(DeviceKind kind) const;
  DeviceBackend* backend_or_null(DeviceKind kind) const;  // null when it has no device
  // The device a DLPack (device_type, device_id) pair names: kDLCPU and the host
  // codes some backend accepts (pinned memory) are the CPU, a backend's own codes
  // its device. Throws UnsupportedOperationError naming the supported codes.
  Device device_from_dlpack(int dl_device_type, int dl_device_id) const;
  // The DLPack device code of d's memory (kDLCPU for the CPU).
  int dlpack_device_type(const Device& d) const;
  // Throws InvalidArgumentError unless d names an existing device.
  void check_device(const Device& d) const;

 private:
  template <typename>
  friend class NoDestructor;  // process-lifetime singleton
  DeviceManager();
};

}  // namespace xpuruntime
