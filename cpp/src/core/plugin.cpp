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
#include "xpuruntime/error.h"
#include "xpuruntime/provider.h"
#include "xpuruntime/kernel_registry.h"

namespace xpuruntime {
namespace {

struct PluginRecord {
  PluginStatus status;
  PluginEntry entry;
};

// Which plugin serves which device kind: the only place the core names a device.
// Each line makes its name a DeviceKind (and its alias another spelling of it in
// Device::parse). Built-in plugins have an init function, the others a library file
// name. Accelerators first: DeviceManager lists devices in this order, and the first
// line's kind is the one the seed API's integer device ids name.
struct PluginSource {
  const char* name;
  const char* alias;     // another name Device::parse accepts, or nullptr
  PluginInitFn builtin;  // nullptr: libxpuruntime_<name>.so
};
constexpr PluginSource kPluginSources[] = {
    {"cuda", "gpu", nullptr},
    {"null", nullptr, nullptr},
    {"cpu", nullptr, &cpu_plugin_init},
};
constexpr std::size_t kSourceCount = sizeof(kPluginSources) / sizeof(kPluginSources[0]);

// The kind id of table line i: the CPU is 0 (DeviceKind's default), the others
// 1, 2, ... in table order.
constexpr uint8_t kind_id_of_line(std::size_t i) {
  uint8_t id = 1;
  for (std::size_t j = 0; j < i; ++j) {
    if (kPluginSources[j].builtin != &cpu_plugin_init) ++id;
  }
  return kPluginSources[i].builtin == &cpu_plugin_init ? 0 : id;
}

std::size_t line_of(uint8_t id) {
  for (std::size_t i = 0; i < kSourceCount; ++i) {
    if (kind_id_of_line(i) == id) return i;
  }
  return kSourceCount;
}

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

// Interns the kinds: DeviceKind's constructor is private to the table.
struct DeviceKindTable {
  static DeviceKind of_line(std::size_t i) { return DeviceKind(kind_id_of_line(i)); }
};

DeviceKind DeviceKind::named(std::string_view name) {
  for (std::size_t i = 0; i < kSourceCount; ++i) {
    const PluginSource& s = kPluginSources[i];
    if (name == s.name || (s.alias != nullptr && name == s.alias)) return DeviceKindTable::of_line(i);
  }
  std::string known;
  for (const PluginSource& s : kPluginSources) {
    known += (known.empty() ? "'" : ", '") + std::string(s.name) + "'";
  }
  XRT_THROW(InvalidArgumentError, "unknown device kind '", name, "'; this build knows ", known,
            " (NPUs are reached through engines: InferenceSession(device='npu'))");
}

std::vector<DeviceKind> DeviceKind::all() {
  std::vector<DeviceKind> out;
  for (std::size_t i = 0; i < kSourceCount; ++i) out.push_back(DeviceKindTable::of_line(i));
  return out;
}

DeviceKind DeviceKind::accelerator() { return DeviceKindTable::of_line(0); }

std::string_view DeviceKind::name() const {
  const std::size_t i = line_of(id_);
  return i < kSourceCount ? std::string_view(kPluginSources[i].name) : std::string_view("unknown");
}

std::string core_library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&core_library_dir), &info) == 0 || !info.dli_fname) return ".";
  std::string path = info.dli_fname;
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string plugin_for_device(DeviceKind kind) { return std::string(kind.name()); }

std::vector<DeviceKind> plugin_device_kinds() { return DeviceKind::all(); }

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

std::optional<DeviceKind> kernels_run_by(DeviceKind kind) {
  if (kind.is_cpu()) return std::nullopt;
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  auto it = records().find(std::string(kind.name()));
  if (it == records().end() || !it->second.status.loaded) return std::nullopt;
  return it->second.entry.runs_kernels_of;
}

std::vector<PluginStatus> plugin_statuses() {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  std::vector<PluginStatus> out;
  for (auto& [k, v] : records()) out.push_back(v.status);
  return out;
}

}  // namespace xpuruntime
