// KernelRegistry: op -> kernels, metadata checks, and the declared names policies
// validate against (DESIGN.md §2, §4).
#include "xpuruntime/kernel_registry.h"

#include <algorithm>
#include <mutex>
#include <set>
#include <sstream>

#include "core/policy/known_names.h"
#include "xpuruntime/error.h"
#include "xpuruntime/plugin.h"
#include "xpuruntime/policy.h"

namespace xpuruntime {
namespace {

std::string join_dtypes(const std::vector<DType>& ts) {
  std::string s;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    if (i) s += ", ";
    s += dtype_name(ts[i]);
  }
  return s;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += v[i];
  }
  return s;
}

bool is_static_known_op(const std::string& op) {
  static const std::set<std::string> ops = [] {
    std::set<std::string> s(known_names::canonical_ops().begin(),
                            known_names::canonical_ops().end());
    s.insert(known_names::onnx_ops().begin(), known_names::onnx_ops().end());
    return s;
  }();
  return ops.count(op) != 0;
}

bool by_priority(const KernelPtr& a, const KernelPtr& b) {
  if (a->def().priority != b->def().priority) return a->def().priority > b->def().priority;
  return a->def().name < b->def().name;
}

bool devices_overlap(const KernelDef& a, const KernelDef& b) {
  if (b.runs_on(a.device)) return true;
  return std::any_of(a.more_devices.begin(), a.more_devices.end(),
                     [&](DeviceKind t) { return b.runs_on(t); });
}

// One (op, name) run natively on some device kinds and, on others, only through the
// torch bridge of a routed torch call: the CUDA plugin's flash_v2 KernelDef and the
// bridge's CPU reference of the same kernel. The registry keeps one kernel per (op,
// name), so policies and decision logs say "flash_v2" on every device; each case goes
// to the part that runs on its device, with that part's metadata and checks. The
// native part decides what the Dispatcher lists (not requested_only); on the bridge's
// devices its supports() refuses outside a routed call, so the native engine never
// gets the bridge part.
class DeviceSplitKernel final : public Kernel {
 public:
  DeviceSplitKernel(KernelPtr native, KernelPtr bridge)
      : Kernel(merged_def(native->def(), bridge->def())),
        native_(std::move(native)),
        bridge_(std::move(bridge)) {}

  const KernelPtr& native() const { return native_; }
  const KernelPtr& bridge() const { return bridge_; }
  const Kernel& part(DeviceKind t) const {
    return native_->def().runs_on(t) ? *native_ : *bridge_;
  }

  Support supports(const OpContext& ctx) const override {
    return part(ctx.device.kind).supports(ctx);
  }
  void run(KernelLaunch& launch) const override { part(launch.ctx->device.kind).run(launch); }
  std::vector<std::string> algorithms(const OpContext& ctx) const override {
    return part(ctx.device.kind).algorithms(ctx);
  }
  std::size_t workspace_bytes(const OpContext& ctx) const override {
    return part(ctx.device.kind).workspace_bytes(ctx);
  }
  PreparedKernelPtr prepare(const PrepareContext& pc) const override {
    return part(pc.ctx->device.kind).prepare(pc);
  }

 private:
  static KernelDef merged_def(const KernelDef& native, const KernelDef& bridge) {
    KernelDef d = native;
    auto add = [&](DeviceKind t) {
      if (!d.runs_on(t)) d.more_devices.push_back(t);
    };
    add(bridge.device);
    for (DeviceKind t : bridge.more_devices) add(t);
    return d;
  }

  KernelPtr native_;
  KernelPtr bridge_;
};

// The kernels that make up a registered entry: its two parts when it is split.
std::vector<KernelPtr> parts_of(const KernelPtr& k) {
  if (const auto* split = dynamic_cast<const DeviceSplitKernel*>(k.get())) {
    return {split->native(), split->bridge()};
  }
  return {k};
}

}  // namespace

KernelRegistry& KernelRegistry::instance() {
  // Leaked on purpose: kernels from plugins must not be destroyed after their library
  // is unloaded at exit.
  static KernelRegistry* registry = new KernelRegistry();  // NOLINT(cppcoreguidelines-owning-memory)
  return *registry;
}

KernelRegistry::KernelRegistry() {
  for (const auto& [op, names] : known_names::declared_kernels()) declared_names_[op] = names;
}

void KernelRegistry::register_kernel(KernelPtr kernel, bool replace) {
  XRT_CHECK(kernel != nullptr, InvalidArgumentError, "register_kernel: kernel is null");
  const KernelDef& d = kernel->def();
  XRT_CHECK(!d.op.empty() && !d.name.empty(), InvalidArgumentError,
            "register_kernel: a kernel needs an op and a name (got op='", d.op, "', name='",
            d.name, "')");
  XRT_CHECK(d.name != kAutoKernel, InvalidArgumentError,
            "register_kernel: 'auto' is reserved (it means 'let the dispatcher choose')");
  XRT_CHECK(d.op.find('|') == std::string::npos && d.name.find('|') == std::string::npos,
            InvalidArgumentError, "register_kernel: op and kernel names may not contain '|'");
  XRT_CHECK(d.max_capability == 0 || d.max_capability >= d.min_capability, InvalidArgumentError,
            "register_kernel: kernel '", d.name, "' for op '", d.op, "' has max_capability ",
            d.max_capability, " below min_capability ", d.min_capability);
  std::unique_lock lock(mu_);
  auto& slot = kernels_[d.op][d.name];
  if (slot == nullptr) {
    slot = std::move(kernel);
    ++generation_;
    return;
  }
  // A native kernel and a torch-bridge one (requested_only) of the same name on
  // disjoint device kinds are one kernel split by device (DeviceSplitKernel); a new
  // kernel in the role of a registered part replaces that part only with replace.
  KernelPtr other;  // the registered part the new kernel joins, if any
  bool same_role = false;
  for (const KernelPtr& p : parts_of(slot)) {
    if (p->def().requested_only == d.requested_only) {
      same_role = true;
    } else if (!devices_overlap(p->def(), d)) {
      other = p;
    }
  }
  XRT_CHECK(!same_role || replace, InvalidArgumentError, "register_kernel: op '", d.op,
            "' already has a kernel named '", d.name, "' (provider '", slot->def().provider,
            "'); unregister it first or pass replace=true");
  XRT_CHECK(other != nullptr || replace, InvalidArgumentError, "register_kernel: op '", d.op,
            "' already has a kernel named '", d.name, "' (provider '", slot->def().provider,
            "') on the same devices; unregister it first or pass replace=true");
  if (other == nullptr) {
    slot = std::move(kernel);
  } else if (d.requested_only) {
    slot = std::make_shared<DeviceSplitKernel>(std::move(other), std::move(kernel));
  } else {
    slot = std::make_shared<DeviceSplitKernel>(std::move(kernel), std::move(other));
  }
  ++generation_;
}

bool KernelRegistry::unregister_kernel(const std::string& op, const std::string& name) {
  std::unique_lock lock(mu_);
  auto it = kernels_.find(op);
  if (it == kernels_.end() || it->second.erase(name) == 0) return false;
  if (it->second.empty()) kernels_.erase(it);
  ++generation_;
  return true;
}

KernelPtr KernelRegistry::find(const std::string& op, const std::string& name) const {
  std::shared_lock lock(mu_);
  auto it = kernels_.find(op);
  if (it == kernels_.end()) return nullptr;
  auto k = it->second.find(name);
  return k == it->second.end() ? nullptr : k->second;
}

std::vector<KernelPtr> KernelRegistry::kernels(const std::string& op) const {
  std::vector<KernelPtr> out;
  {
    std::shared_lock lock(mu_);
    auto it = kernels_.find(op);
    if (it == kernels_.end()) return out;
    for (const auto& [name, k] : it->second) out.push_back(k);
  }
  std::stable_sort(out.begin(), out.end(), by_priority);
  return out;
}

std::vector<KernelDef> KernelRegistry::list(const std::optional<std::string>& op,
                                            const std::optional<DeviceKind>& device) const {
  std::vector<KernelPtr> all;
  {
    std::shared_lock lock(mu_);
    for (const auto& [o, by_name] : kernels_) {
      if (op && *op != o) continue;
      for (const auto& [name, k] : by_name) {
        // A split kernel lists as its parts: each with the devices it really runs on.
        for (const KernelPtr& p : parts_of(k)) {
          if (!device || p->def().runs_on(*device)) all.push_back(p);
        }
      }
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const KernelPtr& a, const KernelPtr& b) {
    if (a->def().op != b->def().op) return a->def().op < b->def().op;
    return by_priority(a, b);
  });
  std::vector<KernelDef> out;
  out.reserve(all.size());
  for (const auto& k : all) out.push_back(k->def());
  return out;
}

Support KernelRegistry::check(const Kernel& kernel, const OpContext& ctx) {
  if (const auto* split = dynamic_cast<const DeviceSplitKernel*>(&kernel)) {
    return check(split->part(ctx.device.kind), ctx);  // that part's metadata and checks
  }
  const KernelDef& d = kernel.def();
  // A device that runs another kind's kernels (PluginEntry::runs_kernels_of) takes them.
  const auto borrowed = [&] {
    const std::optional<DeviceKind> source = kernels_run_by(ctx.device.kind);
    return source && d.runs_on(*source);
  };
  if (!d.runs_on(ctx.device.kind) && !borrowed()) {
    return Support::no(reason::kDeviceMismatch,
                       std::string("kernel runs on ") + std::string(d.device.name()) +
                           ", the call is on " + ctx.device.str());
  }
  if (!d.dtypes.empty()) {
    for (std::size_t i = 0; i < ctx.inputs.size(); ++i) {
      if (std::find(d.dtypes.begin(), d.dtypes.end(), ctx.inputs[i].dtype) == d.dtypes.end()) {
        return Support::no(reason::kDtypeUnsupported,
                           "input " + std::to_string(i) + " is " +
                               std::string(dtype_name(ctx.inputs[i].dtype)) + "; kernel takes " +
                               join_dtypes(d.dtypes));
      }
    }
  }
  if (!d.layouts.empty() &&
      std::find(d.layouts.begin(), d.layouts.end(), "strided") == d.layouts.end()) {
    for (std::size_t i = 0; i < ctx.inputs.size(); ++i) {
      std::string l = ctx.inputs[i].layout();
      if (std::find(d.layouts.begin(), d.layouts.end(), l) == d.layouts.end()) {
        return Support::no(reason::kLayoutUnsupported, "input " + std::to_string(i) + " is " +
                                                           l + "; kernel takes " + join(d.layouts));
      }
    }
  }
  if (!ctx.device.is_cpu()) {
    if (d.min_capability > 0 && ctx.capability < d.min_capability) {
      return Support::no(reason::kCapabilityTooLow,
                         "needs sm" + std::to_string(d.min_capability) + "+, device is sm" +
                             std::to_string(ctx.capability));
    }
    if (d.max_capability > 0 && ctx.capability > d.max_capability) {
      return Support::no(reason::kCapabilityTooHigh,
                         "supports up to sm" + std::to_string(d.max_capability) +
                             ", device is sm" + std::to_string(ctx.capability));
    }
  }
  if (ctx.deterministic && !d.deterministic) {
    return Support::no(reason::kNondeterministic,
                       "kernel is not bitwise reproducible and the policy asks for determinism");
  }
  Support s;
  try {
    s = kernel.supports(ctx);
  } catch (const std::exception& e) {
    return Support::no(reason::kSupportsError, std::string("supports() raised: ") + e.what());
  }
  if (!s.ok) {
    if (s.reason_code.empty()) s.reason_code = reason::kShapeUnsupported;
    return s;
  }
  if (ctx.workspace_limit_bytes > 0) {
    std::size_t need = kernel.workspace_bytes(ctx);
    if (need > ctx.workspace_limit_bytes) {
      return Support::no(reason::kWorkspaceExceeded,
                         "needs " + std::to_string(need) + " bytes of workspace, limit is " +
                             std::to_string(ctx.workspace_limit_bytes));
    }
  }
  return Support::yes();
}

void KernelRegistry::register_known_kernel_name(const std::string& op, const std::string& name) {
  XRT_CHECK(!op.empty() && !name.empty(), InvalidArgumentError,
            "register_known_kernel_name: op and name must be non-empty (got op='", op,
            "', name='", name, "')");
  XRT_CHECK(name != kAutoKernel, InvalidArgumentError,
            "register_known_kernel_name: 'auto' is reserved");
  std::unique_lock lock(mu_);
  auto& names = declared_names_[op];
  if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
}

std::vector<std::string> KernelRegistry::known_kernel_names(const std::string& op) const {
  std::set<std::string> names;
  {
    std::shared_lock lock(mu_);
    if (auto it = declared_names_.find(op); it != declared_names_.end()) {
      names.insert(it->second.begin(), it->second.end());
    }
    if (auto it = kernels_.find(op); it != kernels_.end()) {
      for (const auto& [name, k] : it->second) names.insert(name);
    }
  }
  std::vector<std::string> out = {std::string(kAutoKernel)};
  out.insert(out.end(), names.begin(), names.end());
  return out;
}

bool KernelRegistry::is_known_kernel_name(const std::string& op, const std::string& name) const {
  if (name == kAutoKernel) return true;
  std::shared_lock lock(mu_);
  if (auto it = declared_names_.find(op); it != declared_names_.end()) {
    if (std::find(it->second.begin(), it->second.end(), name) != it->second.end()) return true;
  }
  auto it = kernels_.find(op);
  return it != kernels_.end() && it->second.count(name) != 0;
}

std::vector<std::string> KernelRegistry::known_ops() const {
  std::set<std::string> ops(known_names::canonical_ops().begin(), known_names::canonical_ops().end());
  ops.insert(known_names::onnx_ops().begin(), known_names::onnx_ops().end());
  std::shared_lock lock(mu_);
  for (const auto& [op, k] : kernels_) ops.insert(op);
  for (const auto& [op, n] : declared_names_) ops.insert(op);
  ops.insert(extra_ops_.begin(), extra_ops_.end());
  return {ops.begin(), ops.end()};
}

bool KernelRegistry::is_known_op(const std::string& op) const {
  if (is_static_known_op(op)) return true;
  std::shared_lock lock(mu_);
  return kernels_.count(op) != 0 || declared_names_.count(op) != 0 ||
         std::find(extra_ops_.begin(), extra_ops_.end(), op) != extra_ops_.end();
}

std::string KernelRegistry::canonical_op_for_alias(const std::string& op) {
  std::string lower = op;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const auto& aliases = known_names::op_aliases();
  if (auto it = aliases.find(lower); it != aliases.end()) return it->second;
  // "MatMul" or "Softmax": the ONNX spelling of a key we know in lower case.
  if (lower != op && is_static_known_op(lower)) return lower;
  return "";
}

void KernelRegistry::register_known_op(const std::string& op) {
  XRT_CHECK(!op.empty() && op.find('|') == std::string::npos, InvalidArgumentError,
            "register_known_op: op must be non-empty and may not contain '|' (got '", op, "')");
  std::unique_lock lock(mu_);
  if (std::find(extra_ops_.begin(), extra_ops_.end(), op) == extra_ops_.end()) {
    extra_ops_.push_back(op);
  }
}

uint64_t KernelRegistry::generation() const {
  std::shared_lock lock(mu_);
  return generation_;
}

int64_t TensorArg::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {
// The default binding of a Kernel to a plan step: every run wraps the arguments as
// (non-owning) Tensors on the step's device and calls Kernel::run with the step's
// OpContext, so kernels written against KernelLaunch run inside plans unchanged.
class LaunchAdapter final : public PreparedKernel {
 public:
  LaunchAdapter(const Kernel* kernel, std::shared_ptr<const Kernel> keep, OpContext ctx,
                std::string algorithm)
      : kernel_(kernel), keep_(std::move(keep)), ctx_(std::move(ctx)), algorithm_(std::move(algorithm)) {}

  void run(const KernelArgs& args) const override {
    KernelLaunch launch;
    launch.ctx = &ctx_;
    launch.stream = args.stream;
    launch.algorithm = algorithm_;
    launch.workspace = args.workspace;
    launch.workspace_bytes = args.workspace_bytes;
    auto wrap = [&](const TensorArg& a) {
      if (!a.present()) return Tensor();
      auto storage = std::make_shared<Storage>(a.data, a.nbytes(), ctx_.device, nullptr);
      return Tensor(std::move(storage), a.shape, Tensor::contiguous_strides(a.shape), 0, a.dtype);
    };
    for (const TensorArg& a : args.inputs) launch.inputs.push_back(wrap(a));
    for (const TensorArg& a : args.outputs) launch.outputs.push_back(wrap(a));
    kernel_->run(launch);
  }
  std::size_t workspace_bytes() const override { return kernel_->workspace_bytes(ctx_); }

 private:
  const Kernel* kernel_;
  std::shared_ptr<const Kernel> keep_;  // keeps a registry kernel alive after unregistering
  OpContext ctx_;
  std::string algorithm_;
};
}  // namespace

PreparedKernelPtr Kernel::prepare(const PrepareContext& pc) const {
  XRT_CHECK(pc.ctx != nullptr, InvalidArgumentError, "Kernel::prepare of '", def_.name,
            "' without an OpContext");
  return std::make_shared<LaunchAdapter>(this, weak_from_this().lock(), *pc.ctx, pc.algorithm);
}

}  // namespace xpuruntime
