// Plugin loading (plugin.h): one init per plugin, run once; the kernels and the
// provider it returns are registered right away, so whoever loads a plugin first
// (DeviceManager, the torch bridge, a matmul) finds the same registrations.
#include "xpuruntime/plugin.h"

#include <dlfcn.h>

#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>

#include "core/no_destructor.h"
#include "xpuruntime/graph/provider.h"
#include "xpuruntime/kernel_registry.h"

namespace xpuruntime {
namespace {

struct PluginRecord {
  PluginStatus status;
  PluginEntry entry;
};

// Which plugin serves which device type: the only place the core names a device
// plugin. Built-in plugins have an init function, the others a library file name.
struct PluginSource {
  const char* name;
  DeviceType type;
  PluginInitFn builtin;  // nullptr: libxpuruntime_<name>.so
};
// Accelerators first: DeviceManager lists devices in this order.
constexpr PluginSource kPluginSources[] = {
    {"cuda", DeviceType::kCUDA, nullptr},
    {"cpu", DeviceType::kCPU, &cpu_plugin_init},
};

// Guards records(); held while a plugin initializes, so init runs once. Recursive:
// a plugin's registration may itself reach the plugin registry on this thread.
std::recursive_mutex g_mu;
std::map<std::string, PluginRecord>& records() {
  static NoDestructor<std::map<std::string, PluginRecord>> r;  // plugins stay loaded
  return r.get();
}

const PluginSource* source_of(const std::string& name) {
  for (const PluginSource& s : kPluginSources) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

// Finds the init function: the built-in one, or xpuruntime_plugin_init of the library.
PluginInitFn resolve_init(const std::string& name, PluginStatus& status) {
  const PluginSource* src = source_of(name);
  if (src != nullptr && src->builtin != nullptr) {
    status.path = "built-in";
    return src->builtin;
  }
  const char* env_dir = std::getenv("XRT_PLUGIN_DIR");
  const std::string dir = (env_dir && *env_dir) ? env_dir : core_library_dir();
  status.path = dir + "/libxpuruntime_" + name + ".so";
  // RTLD_LOCAL: the plugin's vendor symbols stay private to it.
  void* handle = dlopen(status.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    status.error = err ? err : "dlopen failed";
    return nullptr;
  }
  auto init = reinterpret_cast<PluginInitFn>(dlsym(handle, kPluginInitSymbol));
  if (init == nullptr) {
    status.error = status.path + " exports no " + kPluginInitSymbol +
                   " (a plugin from another build: rebuild and reinstall xpuruntime)";
  }
  return init;
}

// Registers what an initialized plugin brings. A failure is reported in the status
// (the backend stays usable), never thrown at whoever loaded the plugin.
void register_contributions(PluginRecord& rec) {
  try {
    if (rec.entry.register_kernels != nullptr) rec.entry.register_kernels(KernelRegistry::instance());
    if (rec.entry.provider != nullptr) graph::ProviderRegistry::instance().add(rec.entry.provider);
  } catch (const std::exception& e) {
    rec.status.error = "registering the " + rec.status.name + " plugin's kernels failed: " + e.what();
  }
}

PluginRecord& load_locked(const std::string& name) {
  auto it = records().find(name);
  if (it != records().end()) return it->second;
  // The record exists before init runs, so a nested load from the plugin's own
  // registration (a provider asking the DeviceManager for its backend) finds it.
  PluginRecord& rec = records()[name];
  rec.status.name = name;
  PluginInitFn init = resolve_init(name, rec.status);
  if (init == nullptr) return rec;
  PluginEntry entry;
  const int rc = init(kPluginApiVersion, &entry);
  if (entry.api_version != kPluginApiVersion) {
    rec.status.error = rec.status.path + " implements plugin API version " +
                       std::to_string(entry.api_version) + ", this core " +
                       std::to_string(kPluginApiVersion) +
                       " (a plugin from another build: rebuild and reinstall xpuruntime)";
  } else if (rc != 0) {
    rec.status.error =
        entry.unavailable_reason.empty() ? "the plugin's init failed" : entry.unavailable_reason;
  } else {
    rec.entry = std::move(entry);
    rec.status.loaded = true;
    register_contributions(rec);
  }
  return rec;
}

}  // namespace

std::string core_library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&core_library_dir), &info) == 0 || !info.dli_fname) return ".";
  std::string path = info.dli_fname;
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string plugin_for_device(DeviceType type) {
  for (const PluginSource& s : kPluginSources) {
    if (s.type == type) return s.name;
  }
  return std::string(device_type_name(type));
}

std::vector<DeviceType> plugin_device_types() {
  std::vector<DeviceType> out;
  for (const PluginSource& s : kPluginSources) out.push_back(s.type);
  return out;
}

void load_device_plugins() {
  for (const PluginSource& s : kPluginSources) load_plugin(s.name);
}

const PluginStatus& load_plugin(const std::string& name) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  return load_locked(name).status;
}

DeviceBackend* plugin_backend(const std::string& plugin, std::string* why) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  const PluginRecord& rec = load_locked(plugin);
  if (why != nullptr) {
    if (!rec.status.loaded) {
      std::string upper;
      for (char c : plugin) upper += static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
      *why = upper + " plugin not loaded (" + rec.status.path + "): " + rec.status.error +
             ". Build with the " + upper + " plugin (XRT_" + upper +
             "=ON) and make sure its vendor libraries are on the library path.";
    } else {
      *why = rec.entry.unavailable_reason;
    }
  }
  return rec.entry.backend;
}

void* plugin_lookup(const std::string& plugin, const char* name) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  const PluginRecord& rec = load_locked(plugin);
  return rec.entry.lookup != nullptr ? rec.entry.lookup(name) : nullptr;
}

std::vector<PluginStatus> plugin_statuses() {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  std::vector<PluginStatus> out;
  for (auto& [k, v] : records()) out.push_back(v.status);
  return out;
}

}  // namespace xpuruntime
