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

enum class DeviceType : uint8_t { kCPU = 0, kCUDA = 1 };

std::string_view device_type_name(DeviceType t);  // "cpu" | "cuda"

// A device kind plus an index ("cpu", "cuda:0"). Cheap value type.
struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int i) { return {DeviceType::kCUDA, i}; }
  // Parses "cpu", "cuda", "cuda:1", "gpu:0"; throws InvalidArgumentError otherwise.
  static Device parse(std::string_view s);
  std::string str() const;
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && a.index == b.index;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

// The fields of seed 004 §3.1 plus the device type and a few that users ask for.
struct DeviceInfo {
  int device_id = 0;
  DeviceType device_type = DeviceType::kCPU;
  std::string name;
  std::size_t total_memory = 0;
  std::size_t free_memory = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int sm_count = 0;  // CUDA: multiprocessors; CPU: logical cores
  bool supports_fp16 = false;
  bool supports_bf16 = false;
  bool supports_int8 = false;
  std::string driver_version;   // CUDA driver "13.0"; empty on CPU
  std::string runtime_version;  // CUDA runtime "13.0"; empty on CPU
  std::string pci_bus_id;       // CUDA only
};

class DeviceBackend;

// A registry of device backends keyed by device type: each comes from the plugin
// serving that type (plugin.h), loaded on first use.
class DeviceManager {
 public:
  static DeviceManager& instance();

  // Number of CUDA devices (seed semantics); 0 without a GPU or driver.
  int get_device_count() const;
  int get_device_count(DeviceType type) const;
  // CUDA devices first (by index), then the CPU.
  std::vector<DeviceInfo> get_all_devices() const;
  DeviceInfo get_device_info(int device_id) const;  // CUDA device by index
  DeviceInfo get_device_info(const Device& d) const;
  // The current device of the calling thread (CUDA device if any, else CPU).
  Device get_current_device() const;
  void set_current_device(int device_id);
  void set_current_device(const Device& d);
  // Waits for all work on the device; device_id -1 means the current device.
  void synchronize(int device_id = -1) const;
  void synchronize(const Device& d) const;

  // Why a device type reports no devices ("" when it is usable).
  std::string unavailable_reason(DeviceType type) const;
  std::string cuda_unavailable_reason() const;  // unavailable_reason(DeviceType::kCUDA)
  // The backend of a device kind; throws BackendUnavailableError with the reason.
  DeviceBackend& backend(DeviceType type) const;
  DeviceBackend* backend_or_null(DeviceType type) const;
  // Throws InvalidArgumentError unless d names an existing device.
  void check_device(const Device& d) const;

 private:
  template <typename>
  friend class NoDestructor;  // process-lifetime singleton
  DeviceManager();
};

}  // namespace xpuruntime
