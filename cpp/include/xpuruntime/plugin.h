// Run-time loaded plugins (DESIGN.md §2): vendor-library backends live in shared
// libraries next to libxpuruntime_core.so (or in $XRT_PLUGIN_DIR) and are opened
// with dlopen on first use, so a machine without those libraries still imports us.
// Thread-safe; plugins stay loaded until process exit.
#pragma once

#include <string>
#include <vector>

namespace xpuruntime {

struct PluginStatus {
  std::string name;     // "cuda"
  std::string path;     // the file tried
  bool loaded = false;
  std::string error;    // dlerror() or the plugin's own reason
};

// Loads (once) and returns the status of a plugin: "cuda" → libxpuruntime_cuda.so.
const PluginStatus& load_plugin(const std::string& name);
// A symbol exported by a loaded plugin, or nullptr (plugin absent or no such symbol).
void* plugin_symbol(const std::string& plugin, const char* symbol);
std::vector<PluginStatus> plugin_statuses();
// The folder holding libxpuruntime_core.so (where plugins are looked up).
std::string core_library_dir();

}  // namespace xpuruntime
