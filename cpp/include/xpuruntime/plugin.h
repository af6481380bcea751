// Device plugins (DESIGN.md §2). Each device kind is served by one plugin: the CPU
// one is built into the core, the others are shared libraries next to
// libxpuruntime_core.so (or in $XRT_PLUGIN_DIR), opened with dlopen on first use so
// a machine without a plugin's vendor libraries still imports us.
//
// A plugin library exports exactly one extern "C" symbol, xpuruntime_plugin_init
// (PluginInitFn). The core calls it once with kPluginApiVersion; the plugin fills a
// PluginEntry: its device backend, its execution provider, a kernel-registration
// function and a lookup for the entry points other parts call (flash attention,
// LayerNorm, strided copy, ...: names in xpuruntime/cuda_kernels_abi.h). Loading a
// plugin registers its kernels into KernelRegistry::instance() and its provider into
// graph's ProviderRegistry; the DeviceManager takes its backend.
//
// How to add a device: a folder backends/<device>/ with a DeviceBackend, its kernels
// and an xpuruntime_plugin_init; then one line in the core's plugin table naming the
// file that serves the device type (plugin.cpp).
//
// Thread-safe; plugins stay loaded until process exit.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "xpuruntime/device.h"

namespace xpuruntime {

class DeviceBackend;
class KernelRegistry;
namespace graph {
class ExecutionProvider;
}  // namespace graph

// Bumped whenever PluginEntry or the meaning of its fields changes. The core refuses a
// plugin built against another version, and a plugin refuses a core of another version.
inline constexpr int kPluginApiVersion = 1;
inline constexpr const char* kPluginInitSymbol = "xpuruntime_plugin_init";

// What a plugin's init fills in. Everything it points to lives until process exit.
struct PluginEntry {
  int api_version = 0;  // the version the plugin was built against
  DeviceType device_type = DeviceType::kCPU;
  // The device backend; null when the plugin cannot serve its device at all (then
  // unavailable_reason says why). A backend with zero devices is not null.
  DeviceBackend* backend = nullptr;
  // What the native engine runs plans with on this device; null when the plugin has
  // none (yet).
  std::shared_ptr<graph::ExecutionProvider> provider;
  // Registers the plugin's kernels; called once, right after init. May be null.
  void (*register_kernels)(KernelRegistry& registry) = nullptr;
  // The address of a named entry point, or null when the plugin has none by that name.
  void* (*lookup)(const char* name) = nullptr;
  std::string unavailable_reason;  // "" when the backend is usable
};

// The one symbol a plugin library exports. Returns 0 and fills *out, or returns
// non-zero and puts the reason in out->unavailable_reason (version mismatch, failed
// initialization). Never throws.
using PluginInitFn = int (*)(int api_version, PluginEntry* out);

// The built-in CPU plugin's init (backends/cpu/cpu_plugin.cpp).
int cpu_plugin_init(int api_version, PluginEntry* out);

struct PluginStatus {
  std::string name;     // "cuda"
  std::string path;     // the file tried ("built-in" for the CPU)
  bool loaded = false;  // init ran and returned an entry
  std::string error;    // dlerror(), the version mismatch or the plugin's own reason
};

// Loads (once) the plugin `name` ("cpu", "cuda" → libxpuruntime_cuda.so), runs its
// init, registers its kernels and provider; returns its status. A missing library is
// a status, not an exception.
const PluginStatus& load_plugin(const std::string& name);
// Loads every device plugin this core knows (a missing one is a status, not an
// error), so their kernels are registered: list_kernels() shows every kernel that
// could run in this process.
void load_device_plugins();
// The name of the plugin serving a device type ("cpu", "cuda").
std::string plugin_for_device(DeviceType type);
// The device types some plugin serves, accelerators first.
std::vector<DeviceType> plugin_device_types();
// The device backend of a loaded plugin, or nullptr with *why set (plugin absent,
// failed to initialize).
DeviceBackend* plugin_backend(const std::string& plugin, std::string* why = nullptr);
// A named entry point of a plugin (loaded on demand), or nullptr when the plugin is
// absent or has no such entry.
void* plugin_lookup(const std::string& plugin, const char* name);
// plugin_lookup cast to the entry's function type, e.g.
// plugin_entry<cuda_kernels::StridedCopyEntry>("cuda", cuda_kernels::entry::kStridedCopy).
template <typename Fn>
Fn plugin_entry(const std::string& plugin, const char* name) {
  return reinterpret_cast<Fn>(plugin_lookup(plugin, name));
}
std::vector<PluginStatus> plugin_statuses();
// The folder holding libxpuruntime_core.so (where plugins are looked up).
std::string core_library_dir();

}  // namespace xpuruntime
