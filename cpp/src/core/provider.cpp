// ProviderRegistry: execution providers by device kind (provider.h).
#include "xpuruntime/provider.h"

#include <mutex>

#include "xpuruntime/plugin.h"

#include <algorithm>

#include "xpuruntime/error.h"

namespace xpuruntime::graph {

void RunResources::throw_no_device_memory() {
  XRT_THROW(UnsupportedOperationError,
            "this execution provider has no device memory of its own: pass host arrays");
}

std::unique_ptr<RunResources> ExecutionProvider::begin_run_on(NativeStream stream, std::size_t arena_bytes,
                                                              std::size_t workspace_bytes) const {
  XRT_CHECK(stream == nullptr, UnsupportedOperationError, "the '", name(),
            "' execution provider runs plans on its own streams; do not pass stream= for it");
  return begin_run(arena_bytes, workspace_bytes);
}

int ExecutionProvider::target_capability(const std::string& target) const {
  XRT_CHECK(target.empty(), InvalidArgumentError, "device '", name(),
            "' takes no compile target (got '", target,
            "'): its plans run on any machine with the device; leave target empty");
  return capability();
}

std::map<std::string, std::string> ExecutionProvider::target_environment(
    const std::string& target) const {
  (void)target_capability(target);
  return environment();
}

ProviderRegistry& ProviderRegistry::instance() {
  // Leaked on purpose: providers from plugins must not be destroyed after their
  // library is unloaded at exit.
  static ProviderRegistry* registry = [] {
    auto* r = new ProviderRegistry();  // NOLINT(cppcoreguidelines-owning-memory)
    r->process_wide_ = true;
    return r;
  }();
  return *registry;
}

bool ProviderRegistry::add(ProviderPtr provider, bool replace) {
  XRT_CHECK(provider != nullptr, InvalidArgumentError, "ProviderRegistry::add: provider is null");
  const std::string& name = provider->name();
  XRT_CHECK(!name.empty(), InvalidArgumentError,
            "ProviderRegistry::add: a provider needs a device-kind name "
            "(\"cpu\", \"cuda\", ...)");
  std::unique_lock lock(mu_);
  for (ProviderPtr& p : providers_) {
    if (p->name() != name) continue;
    if (!replace) return false;
    p = std::move(provider);
    return true;
  }
  providers_.push_back(std::move(provider));
  return true;
}

bool ProviderRegistry::remove(const std::string& device_kind) {
  std::unique_lock lock(mu_);
  auto it = std::find_if(providers_.begin(), providers_.end(),
                         [&](const ProviderPtr& p) { return p->name() == device_kind; });
  if (it == providers_.end()) return false;
  providers_.erase(it);
  return true;
}

ProviderPtr ProviderRegistry::lookup(const std::string& device_kind) const {
  std::shared_lock lock(mu_);
  for (const ProviderPtr& p : providers_)
    if (p->name() == device_kind) return p;
  return nullptr;
}

void ProviderRegistry::start_core() const {
  // Starting the device manager runs the built-in plugin entries, which add their
  // providers here; graph/ names no device to make that happen.
  if (process_wide_) DeviceManager::instance();
}

void ProviderRegistry::load_plugins() const {
  if (!process_wide_) return;
  static std::once_flag plugins;
  std::call_once(plugins, [] { load_device_plugins(); });
}

ProviderPtr ProviderRegistry::find(const std::string& device_kind) const {
  // Always: a provider added at run time may run kernels a built-in plugin registers
  // (a test provider running the CPU kernels). Cheap once the core has started.
  start_core();
  if (ProviderPtr p = lookup(device_kind)) return p;
  // The other device plugins are dlopen'ed on their first use: load them (once) so a
  // provider is found whatever was asked first (a compile for an accelerator before any
  // device query), without loading them for plans that only need the CPU.
  load_plugins();
  return lookup(device_kind);
}

ProviderPtr ProviderRegistry::get(const std::string& device_kind) const {
  if (ProviderPtr p = find(device_kind)) return p;
  std::string known;
  for (const std::string& n : names()) known += (known.empty() ? "" : ", ") + n;
  if (known.empty()) known = "none";
  // A kind of the plugin table ("cuda:0" -> "cuda") whose plugin brought no provider.
  const std::string kind = device_kind.substr(0, device_kind.find(':'));
  bool known_kind = false;
  for (DeviceKind k : DeviceKind::all()) known_kind = known_kind || (!k.is_cpu() && k.name() == kind);
  std::string upper;
  for (char c : kind) upper += static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  XRT_THROW(UnsupportedOperationError, "the native engine has no execution provider for device '",
            device_kind, "' (registered: ", known, ")",
            known_kind ? "; the " + upper +
                             " execution provider is not available in this build, so the native engine runs "
                             "on the CPU only: use device='cpu', or engine='onnxruntime' for GPU inference"
                       : std::string("; compile the plan for one of the registered devices, or load "
                                     "the plugin that provides this one"));
}

std::vector<std::string> ProviderRegistry::names() const {
  start_core();
  load_plugins();
  std::vector<std::string> out;
  {
    std::shared_lock lock(mu_);
    for (const ProviderPtr& p : providers_) out.push_back(p->name());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace xpuruntime::graph
