#include "xpuruntime/plugin.h"

#include "core/no_destructor.h"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>

namespace xpuruntime {
namespace {
struct PluginRecord {
  PluginStatus status;
  void* handle = nullptr;
};
std::mutex g_mu;
std::map<std::string, PluginRecord>& records() {
  static NoDestructor<std::map<std::string, PluginRecord>> r;  // plugins stay loaded
  return r.get();
}
}  // namespace

std::string core_library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&core_library_dir), &info) == 0 || !info.dli_fname) return ".";
  std::string path = info.dli_fname;
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

const PluginStatus& load_plugin(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = records().find(name);
  if (it != records().end()) return it->second.status;
  PluginRecord rec;
  rec.status.name = name;
  const char* env_dir = std::getenv("XRT_PLUGIN_DIR");
  std::string dir = (env_dir && *env_dir) ? env_dir : core_library_dir();
  rec.status.path = dir + "/libxpuruntime_" + name + ".so";
  // RTLD_LOCAL: the plugin's vendor symbols stay private to it.
  rec.handle = dlopen(rec.status.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (rec.handle) {
    rec.status.loaded = true;
  } else {
    const char* err = dlerror();
    rec.status.error = err ? err : "dlopen failed";
  }
  return records().emplace(name, std::move(rec)).first->second.status;
}

void* plugin_symbol(const std::string& plugin, const char* symbol) {
  load_plugin(plugin);
  std::lock_guard<std::mutex> lock(g_mu);
  auto& rec = records().at(plugin);
  return rec.handle ? dlsym(rec.handle, symbol) : nullptr;
}

std::vector<PluginStatus> plugin_statuses() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<PluginStatus> out;
  for (auto& [k, v] : records()) out.push_back(v.status);
  return out;
}

}  // namespace xpuruntime
