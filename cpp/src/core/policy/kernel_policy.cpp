// KernelPolicy: preferences, mode, auto strategy and pins; JSON, fingerprint, and
// validation against the kernel registry (DESIGN.md §3).
#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/policy/known_names.h"
#include "core/policy/policy_json.h"
#include "xpuruntime/error.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/policy.h"

namespace xpuruntime {
namespace {

constexpr std::string_view kWhat = "KernelPolicy";
constexpr std::string_view kKind = "kernel_policy";

const std::vector<std::string>& fields() {
  static const std::vector<std::string> f = {"auto_strategy", "kind",  "mode",
                                             "pins",          "preferences", "schema_version"};
  return f;
}

// The op part of a case key ("matmul|cuda:sm90|..." -> "matmul").
std::string op_of_key(const std::string& key) { return key.substr(0, key.find('|')); }

std::vector<std::string> kernel_list(const nlohmann::json& v, const std::string& op) {
  std::vector<std::string> out;
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (const auto& e : v) {
      XRT_CHECK(e.is_string(), PolicyError, "KernelPolicy preference for op ", quote_input(op),
                " must list kernel names (strings), got ", policy_json::quoted_json(e));
      out.push_back(e.get<std::string>());
    }
  } else {
    XRT_THROW(PolicyError, "KernelPolicy preference for op ", quote_input(op),
              " must be a kernel name or a list of names, got ", policy_json::quoted_json(v));
  }
  XRT_CHECK(!out.empty(), PolicyError, "KernelPolicy preference for op ", quote_input(op),
            " is an empty list; name at least one kernel or \"auto\"");
  return out;
}

}  // namespace

std::string_view to_string(KernelPolicy::Mode m) {
  return m == KernelPolicy::Mode::Require ? "require" : "prefer";
}

std::string_view to_string(KernelPolicy::AutoSelectStrategy s) {
  return s == KernelPolicy::AutoSelectStrategy::BestPerformance ? "best_performance"
                                                                : "first_supported";
}

KernelPolicy::Mode policy_mode_from_string(std::string_view s) {
  if (s == "prefer") return KernelPolicy::Mode::Prefer;
  if (s == "require") return KernelPolicy::Mode::Require;
  XRT_THROW(PolicyError, unknown_choice_message("mode", s, "KernelPolicy", {"prefer", "require"}));
}

KernelPolicy::AutoSelectStrategy auto_strategy_from_string(std::string_view s) {
  // Also reads the seed's enum spellings (seed 004 §6.3 saved str(enum)).
  if (s == "first_supported" || s == "FirstSupported" ||
      s == "AutoSelectStrategy.FirstSupported") {
    return KernelPolicy::AutoSelectStrategy::FirstSupported;
  }
  if (s == "best_performance" || s == "BestPerformance" ||
      s == "AutoSelectStrategy.BestPerformance") {
    return KernelPolicy::AutoSelectStrategy::BestPerformance;
  }
  XRT_THROW(PolicyError, unknown_choice_message("auto_strategy", s, "KernelPolicy",
                                                {"best_performance", "first_supported"}));
}

KernelPolicy& KernelPolicy::set(const std::string& op, const std::string& kernel) {
  return set(op, std::vector<std::string>{kernel});
}

KernelPolicy& KernelPolicy::set(const std::string& op, std::vector<std::string> kernels) {
  XRT_CHECK(!op.empty(), PolicyError, "KernelPolicy.set: the op key is empty");
  XRT_CHECK(!kernels.empty(), PolicyError, "KernelPolicy.set(", quote_input(op),
            "): name at least one kernel or \"auto\"");
  preferences[op] = std::move(kernels);
  return *this;
}

std::vector<std::string> KernelPolicy::get(const std::string& op) const {
  auto it = preferences.find(op);
  return it == preferences.end() ? std::vector<std::string>{} : it->second;
}

KernelPolicy& KernelPolicy::remove(const std::string& op) {
  preferences.erase(op);
  return *this;
}

void KernelPolicy::validate(const KernelRegistry& registry) const {
  XRT_CHECK(schema_version >= 1 && schema_version <= kPolicySchemaVersion, PolicyError,
            "KernelPolicy schema_version ", schema_version, " is not supported (1..",
            kPolicySchemaVersion, ")");
  auto check_op = [&](const std::string& op, std::string_view where) {
    XRT_CHECK(!op.empty(), PolicyError, "KernelPolicy has an empty op key (in ", where, ")");
    if (registry.is_known_op(op)) return;
    std::string canonical = KernelRegistry::canonical_op_for_alias(op);
    XRT_CHECK(canonical.empty(), PolicyError, "KernelPolicy op key ", quote_input(op), " (in ",
              where, ") is a spelling of the canonical key '", canonical, "'; use '", canonical,
              "'");
    // Suggest from every known op, but list only the canonical keys and ops that
    // have kernels here (the full ONNX list would bury the message).
    std::vector<std::string> all = registry.known_ops();
    std::set<std::string> shown_set(known_names::canonical_ops().begin(),
                                    known_names::canonical_ops().end());
    for (const auto& o : all) {
      if (registry.known_kernel_names(o).size() > 1) shown_set.insert(o);  // more than "auto"
    }
    std::vector<std::string> shown(shown_set.begin(), shown_set.end());
    std::string msg = unknown_choice_message("op key", op, where, shown);
    std::string near = closest_match(op, all);
    if (!near.empty() && msg.find("did you mean") == std::string::npos) {
      msg += "; did you mean '" + near + "'?";
    }
    msg += " (any lower-case ONNX op type is also a valid key)";
    XRT_THROW(PolicyError, msg);
  };
  auto check_kernel = [&](const std::string& op, const std::string& name, std::string_view where) {
    if (registry.is_known_kernel_name(op, name)) return;
    XRT_THROW(
        PolicyError,
        unknown_choice_message("kernel", name, std::string(where) + " for op " + quote_input(op),
                               registry.known_kernel_names(op)),
        " (a kernel of another subsystem is declared with register_known_kernel_name(op, "
        "name); Python: xpuruntime.kernels.declare)");
  };
  for (const auto& [op, names] : preferences) {
    check_op(op, "preferences");
    XRT_CHECK(!names.empty(), PolicyError, "KernelPolicy preference for op ", quote_input(op),
              " is an empty list; name at least one kernel or \"auto\"");
    std::set<std::string> seen;
    for (std::size_t i = 0; i < names.size(); ++i) {
      const auto& n = names[i];
      XRT_CHECK(seen.insert(n).second, PolicyError, "KernelPolicy preference for op ",
                quote_input(op), " lists kernel ", quote_input(n), " twice");
      if (n == kAutoKernel) {
        XRT_CHECK(i + 1 == names.size(), PolicyError, "KernelPolicy preference for op ",
                  quote_input(op),
                  ": \"auto\" must be the last entry (it stands for every remaining kernel)");
        continue;
      }
      check_kernel(op, n, "preferences");
    }
  }
  for (const auto& [key, pin] : pins) {
    std::string op = op_of_key(key);
    check_op(op, "pins");
    XRT_CHECK(key.find('|') != std::string::npos, PolicyError, "KernelPolicy pin key ",
              quote_input(key),
              " is not a case key (expected 'op|device|inputs->outputs|attrs' as written by "
              "Dispatcher.export_pins)");
    XRT_CHECK(!pin.kernel.empty() && pin.kernel != kAutoKernel, PolicyError, "KernelPolicy pin ",
              quote_input(key), " must name a kernel (not empty or \"auto\")");
    check_kernel(op, pin.kernel, "pins");
  }
}

std::string KernelPolicy::to_json(int indent) const {
  nlohmann::json j;
  j["kind"] = kKind;
  j["schema_version"] = schema_version;
  j["mode"] = std::string(to_string(mode));
  j["auto_strategy"] = std::string(to_string(auto_strategy));
  nlohmann::json prefs = nlohmann::json::object();
  for (const auto& [op, names] : preferences) {
    // One name is written as a string, so the canonical form of the seed's
    // KernelPolicy(matmul="cublasLt") stays the plain mapping users write by hand.
    prefs[op] = names.size() == 1 ? nlohmann::json(names[0]) : nlohmann::json(names);
  }
  j["preferences"] = prefs;
  nlohmann::json pj = nlohmann::json::object();
  for (const auto& [key, pin] : pins) pj[key] = {{"kernel", pin.kernel}, {"algorithm", pin.algorithm}};
  j["pins"] = pj;
  return j.dump(indent < 0 ? -1 : indent);
}

KernelPolicy KernelPolicy::from_json(std::string_view text) {
  nlohmann::json j = policy_json::parse_object(text, kWhat);
  KernelPolicy p;
  p.schema_version = policy_json::check_header(j, kWhat, kKind, fields());
  p.mode = policy_mode_from_string(policy_json::get_string(j, "mode", kWhat, "prefer"));
  p.auto_strategy = auto_strategy_from_string(
      policy_json::get_string(j, "auto_strategy", kWhat, "first_supported"));
  if (j.contains("preferences")) {
    XRT_CHECK(j["preferences"].is_object(), PolicyError,
              "KernelPolicy field 'preferences' must map op keys to kernel names, got ",
              policy_json::quoted_json(j["preferences"]));
    for (const auto& [op, v] : j["preferences"].items()) p.preferences[op] = kernel_list(v, op);
  }
  if (j.contains("pins")) {
    XRT_CHECK(j["pins"].is_object(), PolicyError,
              "KernelPolicy field 'pins' must map case keys to {kernel, algorithm}, got ",
              policy_json::quoted_json(j["pins"]));
    for (const auto& [key, v] : j["pins"].items()) {
      XRT_CHECK(v.is_object(), PolicyError, "KernelPolicy pin ", quote_input(key),
                " must be an object {\"kernel\": ..., \"algorithm\": ...}, got ",
                policy_json::quoted_json(v));
      std::string where = "KernelPolicy pin " + quote_input(key);
      policy_json::check_header(v, where, "pin", {"algorithm", "kernel"});
      KernelPin pin;
      pin.kernel = policy_json::get_string(v, "kernel", where, "");
      pin.algorithm = policy_json::get_string(v, "algorithm", where, "");
      XRT_CHECK(!pin.kernel.empty(), PolicyError, where, " has no 'kernel'");
      p.pins[key] = std::move(pin);
    }
  }
  return p;
}

std::string KernelPolicy::fingerprint() const { return sha256_hex(canonical_json()); }

std::string KernelPolicy::repr() const {
  std::ostringstream os;
  os << "KernelPolicy(";
  bool first = true;
  auto sep = [&] {
    if (!first) os << ", ";
    first = false;
  };
  for (const auto& [op, names] : preferences) {
    sep();
    os << op << "=";
    if (names.size() == 1) {
      os << "'" << names[0] << "'";
    } else {
      os << "[";
      for (std::size_t i = 0; i < names.size(); ++i) os << (i ? ", " : "") << "'" << names[i] << "'";
      os << "]";
    }
  }
  if (mode != Mode::Prefer) {
    sep();
    os << "mode='" << to_string(mode) << "'";
  }
  if (auto_strategy != AutoSelectStrategy::FirstSupported) {
    sep();
    os << "auto_strategy='" << to_string(auto_strategy) << "'";
  }
  if (!pins.empty()) {
    sep();
    os << "pins=<" << pins.size() << (pins.size() == 1 ? " pin>" : " pins>");
  }
  os << ")";
  return os.str();
}

}  // namespace xpuruntime
