#include <mutex>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "core/no_destructor.h"
#include "xpuruntime/backend.h"
#include "xpuruntime/device.h"
#include "xpuruntime/error.h"
#include "xpuruntime/plugin.h"
#include "xpuruntime/profiler.h"

namespace xpuruntime {
namespace {

struct CudaState {
  std::once_flag once;
  DeviceBackend* backend = nullptr;  // owned by the plugin, lives until exit
  std::string reason;
};

CudaState& cuda_state() {
  static NoDestructor<CudaState> state;
  return state.get();
}

// Loads the CUDA plugin once. A missing plugin or library is a reason, not an error.
DeviceBackend* cuda_backend_or_null(std::string* reason = nullptr) {
  CudaState& st = cuda_state();
  std::call_once(st.once, [&st] {
    const PluginStatus& status = load_plugin("cuda");
    if (!status.loaded) {
      st.reason = "CUDA plugin not loaded (" + status.path + "): " + status.error +
                  ". Build with the CUDA toolkit (XRT_CUDA=ON) and make sure libcudart is on the "
                  "library path.";
      return;
    }
    auto entry = reinterpret_cast<BackendPluginEntry>(plugin_symbol("cuda", kBackendPluginSymbol));
    if (!entry) {
      st.reason = std::string("CUDA plugin has no symbol ") + kBackendPluginSymbol;
      return;
    }
    std::string why;
    st.backend = entry(&why);
    if (!st.backend) {
      st.reason = why.empty() ? "CUDA backend failed to initialize" : why;
    } else if (st.backend->device_count() == 0) {
      st.reason = st.backend->unavailable_reason();
      if (st.reason.empty()) st.reason = "no CUDA device found";
    }
  });
  if (reason) *reason = st.reason;
  return st.backend;
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
  return mgr.get();
}

DeviceBackend* DeviceManager::backend_or_null(DeviceType type) const {
  if (type == DeviceType::kCPU) return &cpu_backend();
  DeviceBackend* b = cuda_backend_or_null();
  return (b && b->device_count() > 0) ? b : nullptr;
}

DeviceBackend& DeviceManager::backend(DeviceType type) const {
  if (type == DeviceType::kCPU) return cpu_backend();
  std::string reason;
  DeviceBackend* b = cuda_backend_or_null(&reason);
  XRT_CHECK(b && b->device_count() > 0, BackendUnavailableError, "CUDA is not available: ", reason);
  return *b;
}

std::string DeviceManager::cuda_unavailable_reason() const {
  std::string reason;
  cuda_backend_or_null(&reason);
  return reason;
}

int DeviceManager::get_device_count() const { return get_device_count(DeviceType::kCUDA); }

int DeviceManager::get_device_count(DeviceType type) const {
  if (type == DeviceType::kCPU) return 1;
  DeviceBackend* b = cuda_backend_or_null();
  return b ? b->device_count() : 0;
}

std::vector<DeviceInfo> DeviceManager::get_all_devices() const {
  std::vector<DeviceInfo> out;
  for (int i = 0; i < get_device_count(DeviceType::kCUDA); ++i) out.push_back(get_device_info(i));
  out.push_back(cpu_backend().device_info(0));
  return out;
}

void DeviceManager::check_device(const Device& d) const {
  if (d.is_cpu()) return;
  int n = get_device_count(DeviceType::kCUDA);
  if (n == 0) XRT_THROW(InvalidArgumentError, "device ", d.str(), " requested but ", cuda_unavailable_reason());
  XRT_CHECK(d.index >= 0 && d.index < n, InvalidArgumentError, "device ", d.str(),
            " does not exist: this machine has ", n, " CUDA device(s) (cuda:0..cuda:", n - 1, ")");
}

DeviceInfo DeviceManager::get_device_info(int device_id) const {
  return get_device_info(Device::cuda(device_id));
}

DeviceInfo DeviceManager::get_device_info(const Device& d) const {
  check_device(d);
  return backend(d.type).device_info(d.index);
}

Device DeviceManager::get_current_device() const {
  if (t_has_current) return t_current;
  return get_device_count(DeviceType::kCUDA) > 0 ? Device::cuda(backend(DeviceType::kCUDA).current())
                                                 : Device::cpu();
}

void DeviceManager::set_current_device(int device_id) { set_current_device(Device::cuda(device_id)); }

void DeviceManager::set_current_device(const Device& d) {
  check_device(d);
  if (d.is_cuda()) backend(DeviceType::kCUDA).set_current(d.index);
  t_current = d;
  t_has_current = true;
}

void DeviceManager::synchronize(int device_id) const {
  if (device_id < 0) {
    synchronize(get_current_device());
  } else {
    synchronize(Device::cuda(device_id));
  }
}

void DeviceManager::synchronize(const Device& d) const {
  check_device(d);
  backend(d.type).synchronize_device(d.index);
  if (Profiler::instance().enabled()) Profiler::instance().record_sync("device");
}

}  // namespace xpuruntime
