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
// How to add a device (docs/adding_a_device.md): a folder backends/<device>/ with a
// DeviceBackend, its kernels and an xpuruntime_plugin_init; then one line in the
// core's plugin table (plugin.cpp), which also makes <device> a DeviceKind.
//
// Thread-safe; plugins stay loaded until process exit.
#pragma once

#include <memory>
#include <optional>
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
inline constexpr int kPluginApiVersion = 2;  // 2: DeviceKind, copy_strided, attribute, DLPack codes
inline constexpr const char* kPluginInitSymbol = "xpuruntime_plugin_init";

// What a plugin's init fills in. Everything it points to lives until process exit.
struct PluginEntry {
  int api_version = 0;  // the version the plugin was built against
  DeviceKind device_type;  // the kind it serves: DeviceKind::named(<its table name>)
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
  // A device whose memory is host memory may run another kind's kernels instead of
  // its own (the null device runs the CPU's): KernelRegistry::check then accepts
  // that kind's kernels for calls on this device. Unset: its own kernels only.
  std::optional<DeviceKind> runs_kernels_of;
};

// The one symbol a plugin library exports. Returns 0 and fills *out, or returns
// non-zero and puts the reason in out->unavailable_reason (version mismatch, failed
// initialization). Never throws.
using PluginInitFn = int (*)(int api_version, PluginEntry* out);

// The built-in CPU plugin's init (backends/cpu/cpu_plugin.cpp).
int cpu_plugin_init(int api_version, PluginEntry* out);

struct PluginStatus {
  std::string name;     // the plugin table's name, e.g. "cpu"
  std::string path;     // the file tried ("built-in" for the CPU)
  bool loaded = false;  // init ran and returned an entry
  std::string error;    // dlerror(), the version mismatch or the plugin's own reason
};

// Loads (once) the plugin `name` ("cpu" built in, others libxpuruntime_<name>.so), runs its
// init, registers its kernels and provider; returns its status. A missing library is
// a status, not an exception.
const PluginStatus& load_plugin(const std::string& name);
// Loads every device plugin this core knows (a missing one is a status, not an
// error), so their kernels are registered: list_kernels() shows every kernel that
// could run in this process.
void load_device_plugins();
// The name of the plugin serving a device kind (the kind's name).
std::string plugin_for_device(DeviceKind kind);
// The device kinds some plugin serves, accelerators first (DeviceKind::all()).
std::vector<DeviceKind> plugin_device_kinds();
// The device backend of a loaded plugin, or nullptr with *why set (plugin absent,
// failed to initialize).
DeviceBackend* plugin_backend(const std::string& plugin, std::string* why = nullptr);
// A named entry point of a plugin (loaded on demand), or nullptr when the plugin is
// absent or has no such entry.
void* plugin_lookup(const std::string& plugin, const char* name);
// plugin_lookup cast to the entry's function type, e.g.
// plugin_entry<cuda_kernels::StridedCopyEntry>(plugin, cuda_kernels::entry::kStridedCopy).
template <typename Fn>
Fn plugin_entry(const std::string& plugin, const char* name) {
  return reinterpret_cast<Fn>(plugin_lookup(plugin, name));
}
std::vector<PluginStatus> plugin_statuses();
// The kind whose kernels a loaded plugin's device runs (PluginEntry::runs_kernels_of),
// or nullopt (its own kernels; or its plugin is not loaded).
std::optional<DeviceKind> kernels_run_by(DeviceKind kind);
// The folder holding libxpuruntime_core.so (where plugins are looked up).
std::string core_library_dir();

}  // namespace xpuruntime
