// OpContext and TensorSpec: what the dispatcher and kernels know about one call.
#include <array>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <sstream>

#include "xpuruntime/backend.h"
#include "xpuruntime/device.h"
#include "xpuruntime/error.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/policy.h"

namespace xpuruntime {
namespace {

// Device properties can be slow to query (cudaGetDeviceProperties is ~milliseconds),
// and from_tensors runs per op call, so each device's capability is read once (the
// backend's attribute "capability"; 0 when it has none). 0 = unread.
constexpr int kMaxCachedKinds = 8;
constexpr int kMaxCachedDevices = 64;
std::array<std::array<std::atomic<int>, kMaxCachedDevices>, kMaxCachedKinds> g_capability{};

int capability_of(const Device& d) {
  if (d.is_cpu()) return 0;
  const bool cacheable = d.kind.id() < kMaxCachedKinds && d.index >= 0 && d.index < kMaxCachedDevices;
  if (cacheable) {
    int cached = g_capability[d.kind.id()][d.index].load(std::memory_order_relaxed);
    if (cached > 0) return cached;
  }
  DeviceManager& dm = DeviceManager::instance();
  dm.check_device(d);
  const std::string attr = dm.backend(d.kind).attribute(d.index, "capability");
  int cap = 0;
  std::from_chars(attr.data(), attr.data() + attr.size(), cap);
  if (cacheable && cap > 0) g_capability[d.kind.id()][d.index].store(cap, std::memory_order_relaxed);
  return cap;
}

void write_spec(std::ostringstream& os, const TensorSpec& s) {
  os << dtype_name(s.dtype) << "[";
  for (std::size_t i = 0; i < s.shape.size(); ++i) os << (i ? "," : "") << s.shape[i];
  os << "]";
  std::string l = s.layout();
  if (l != "contiguous") os << "@" << l;
}

}  // namespace

std::string TensorSpec::layout() const {
  if (strides.empty()) return "contiguous";
  if (strides.size() != shape.size()) return "strided";
  auto dense = [](const Shape& sh, const Shape& st) {
    int64_t expect = 1;
    for (std::size_t i = sh.size(); i-- > 0;) {
      if (sh[i] != 1 && st[i] != expect) return false;  // size-1 dims may have any stride
      expect *= sh[i];
    }
    return true;
  };
  if (dense(shape, strides)) return "contiguous";
  if (shape.size() >= 2) {
    Shape sh = shape, st = strides;
    std::swap(sh[sh.size() - 1], sh[sh.size() - 2]);
    std::swap(st[st.size() - 1], st[st.size() - 2]);
    if (dense(sh, st)) return "transposed";
  }
  return "strided";
}

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

OpContext OpContext::from_tensors(std::string op, const std::vector<Tensor>& inputs,
                                  const std::vector<Tensor>& outputs, std::string node) {
  OpContext ctx;
  ctx.op = std::move(op);
  ctx.node = std::move(node);
  const Tensor* first = nullptr;
  for (const auto& t : inputs) {
    if (t.defined()) {
      first = &t;
      break;
    }
  }
  if (!first) {
    for (const auto& t : outputs) {
      if (t.defined()) {
        first = &t;
        break;
      }
    }
  }
  ctx.device = first ? first->device() : Device::cpu();
  ctx.capability = capability_of(ctx.device);
  for (const auto& t : inputs) {
    XRT_CHECK(t.defined(), InvalidArgumentError, "op '", ctx.op, "' (node '", ctx.node,
              "'): an input tensor is undefined");
    XRT_CHECK(t.device() == ctx.device, InvalidArgumentError, "op '", ctx.op, "' (node '",
              ctx.node, "'): inputs are on different devices (", ctx.device.str(), " and ",
              t.device().str(), "); move them to one device first");
    ctx.inputs.push_back(TensorSpec::of(t));
  }
  for (const auto& t : outputs) {
    if (t.defined()) ctx.outputs.push_back(TensorSpec::of(t));
  }
  return ctx;
}

OpContext& OpContext::apply(const ExecutionPolicy& policy) {
  workspace_limit_bytes = policy.workspace_limit_bytes;
  allow_tf32 = policy.allow_tf32;
  deterministic = policy.deterministic;
  strict_no_fallback = policy.has_strict("no_fallback");
  strict_pinned_only = policy.has_strict("pinned_only");
  return *this;
}

std::string OpContext::device_class() const {
  // "<kind>:sm<capability>" where the device has a capability ("cuda:sm90": the
  // spelling pinned policies and goldens use), else the kind ("cpu"). No backend is
  // asked: the context carries the capability.
  if (device.is_cpu() || capability <= 0) return std::string(device.kind.name());
  return std::string(device.kind.name()) + ":sm" + std::to_string(capability);
}

std::string OpContext::case_key() const {
  std::ostringstream os;
  os << op << "|" << device_class() << "|";
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (i) os << ",";
    write_spec(os, inputs[i]);
  }
  os << "->";
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (i) os << ",";
    write_spec(os, outputs[i]);
  }
  os << "|";
  bool first = true;
  for (const auto& [k, v] : attrs) {  // std::map: sorted, so the key is canonical
    os << (first ? "" : ",") << k << "=" << v;
    first = false;
  }
  // tf32 changes which algorithms are legal (and so the tuned winner).
  if (allow_tf32) os << (first ? "" : ",") << "~tf32";
  return os.str();
}

int64_t OpContext::attr_int(const std::string& name, int64_t fallback) const {
  auto it = attrs.find(name);
  if (it == attrs.end()) return fallback;
  int64_t v = 0;
  const std::string& s = it->second;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  XRT_CHECK(ec == std::errc() && p == s.data() + s.size(), InvalidArgumentError, "op '", op,
            "' (node '", node, "'): attribute '", name, "' must be an integer, got '", s, "'");
  return v;
}

double OpContext::attr_float(const std::string& name, double fallback) const {
  auto it = attrs.find(name);
  if (it == attrs.end()) return fallback;
  const std::string& s = it->second;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  XRT_CHECK(!s.empty() && end == s.c_str() + s.size(), InvalidArgumentError, "op '", op,
            "' (node '", node, "'): attribute '", name, "' must be a number, got '", s, "'");
  return v;
}

std::string OpContext::attr_str(const std::string& name, const std::string& fallback) const {
  auto it = attrs.find(name);
  return it == attrs.end() ? fallback : it->second;
}

}  // namespace xpuruntime
