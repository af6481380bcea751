// The null device's plugin entry (xpuruntime/plugin.h): its backend, the one
// execution provider over it, and the CPU's kernels to run (no kernels of its own).
#include <exception>
#include <string>
#include <utility>

#include "backends/null/null_backend.h"
#include "xpuruntime/device_provider.h"
#include "xpuruntime/plugin.h"

extern "C" __attribute__((visibility("default"))) int xpuruntime_plugin_init(int api_version,
                                                                             xpuruntime::PluginEntry* out) {
  namespace xrt = xpuruntime;
  if (out == nullptr) return 1;
  out->api_version = xrt::kPluginApiVersion;
  if (api_version != xrt::kPluginApiVersion) {
    out->unavailable_reason = "the null plugin implements plugin API version " +
                              std::to_string(xrt::kPluginApiVersion) + ", the core asked for " +
                              std::to_string(api_version) + "; install matching builds of both";
    return 1;
  }
  try {
    out->device_type = xrt::null_device::kind();
    out->backend = &xrt::null_device::backend();
    out->runs_kernels_of = xrt::DeviceKind::cpu();
    xrt::graph::DeviceTraits traits;  // its own memory: copies at the plan's edges
    traits.kernel_device = xrt::DeviceKind::cpu();
    traits.unavailable_hint = "set XRT_NULL_DEVICE=1 (a test device), or use device='cpu'";
    out->provider = xrt::graph::make_device_provider(xrt::null_device::backend(), std::move(traits));
    return 0;
  } catch (const std::exception& e) {
    out->unavailable_reason = std::string("the null plugin failed to initialize: ") + e.what();
  }
  return 1;
}
