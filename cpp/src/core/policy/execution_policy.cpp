// ExecutionPolicy: target, precision, shapes, fallback and engine knobs (DESIGN.md §3,
// seed 000 §9); JSON with schema version and fingerprint.
#include <algorithm>
#include <climits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/policy/policy_json.h"
#include "xpuruntime/error.h"
#include "xpuruntime/policy.h"

namespace xpuruntime {
namespace {

constexpr std::string_view kWhat = "ExecutionPolicy";
constexpr std::string_view kKind = "execution_policy";

const std::vector<std::string>& fields() {
  static const std::vector<std::string> f = {
      "allow_fallback",     "allow_tf32",     "cuda_graph",  "deterministic",
      "engine",             "engines",        "forbid",      "keep_io_types", "kind",
      "max_copy_bytes",     "max_fallback_nodes", "max_islands", "pins",
      "precision",          "schema_version", "static_shape", "strict",
      "target",             "threads",        "workspace_limit_bytes"};
  return f;
}

// A list of names: each a non-empty string (PolicyError naming the field otherwise).
std::vector<std::string> get_names(const nlohmann::json& j, const char* field) {
  std::vector<std::string> out;
  if (!j.contains(field) || j[field].is_null()) return out;
  XRT_CHECK(j[field].is_array(), PolicyError, "ExecutionPolicy field '", field,
            "' must be a list of names, got ", policy_json::quoted_json(j[field]));
  for (const auto& s : j[field]) {
    XRT_CHECK(s.is_string(), PolicyError, "ExecutionPolicy field '", field,
              "' holds names, got ", policy_json::quoted_json(s));
    out.push_back(s.get<std::string>());
  }
  return out;
}

// "engine" or "engine@device": both parts non-empty, at most one '@'.
bool valid_placement(std::string_view s) {
  const auto at = s.find('@');
  if (at == std::string_view::npos) return !s.empty();
  return at > 0 && at + 1 < s.size() && s.find('@', at + 1) == std::string_view::npos;
}

}  // namespace

std::string_view to_string(ExecutionPolicy::Target t) {
  switch (t) {
    case ExecutionPolicy::Target::CPU: return "cpu";
    case ExecutionPolicy::Target::CUDA: return "cuda";
    case ExecutionPolicy::Target::NPU: return "npu";
    case ExecutionPolicy::Target::Auto: return "auto";
  }
  return "auto";
}

std::string_view to_string(ExecutionPolicy::Precision p) {
  switch (p) {
    case ExecutionPolicy::Precision::FP32: return "fp32";
    case ExecutionPolicy::Precision::FP16: return "fp16";
    case ExecutionPolicy::Precision::BF16: return "bf16";
    case ExecutionPolicy::Precision::INT8: return "int8";
  }
  return "fp32";
}

ExecutionPolicy::Target target_from_string(std::string_view s) {
  if (s == "cpu") return ExecutionPolicy::Target::CPU;
  if (s == "cuda" || s == "gpu") return ExecutionPolicy::Target::CUDA;
  if (s == "npu") return ExecutionPolicy::Target::NPU;
  if (s == "auto") return ExecutionPolicy::Target::Auto;
  XRT_THROW(PolicyError,
            unknown_choice_message("target", s, "ExecutionPolicy", {"auto", "cpu", "cuda", "npu"}),
            " (a target is a device kind; pick the device index on the session)");
}

ExecutionPolicy::Precision precision_from_string(std::string_view s) {
  if (s == "fp32" || s == "float32" || s == "float") return ExecutionPolicy::Precision::FP32;
  if (s == "fp16" || s == "float16" || s == "half") return ExecutionPolicy::Precision::FP16;
  if (s == "bf16" || s == "bfloat16") return ExecutionPolicy::Precision::BF16;
  if (s == "int8") return ExecutionPolicy::Precision::INT8;
  XRT_THROW(PolicyError, unknown_choice_message("precision", s, "ExecutionPolicy",
                                                {"bf16", "fp16", "fp32", "int8"}));
}

const std::vector<std::string>& strict_assertions() {
  static const std::vector<std::string> a = {"no_cpu_fallback", "no_fallback", "pinned_only"};
  return a;
}

bool ExecutionPolicy::has_strict(std::string_view assertion) const {
  return std::find(strict.begin(), strict.end(), assertion) != strict.end();
}

void ExecutionPolicy::validate() const {
  XRT_CHECK(schema_version >= 1 && schema_version <= kPolicySchemaVersion, PolicyError,
            "ExecutionPolicy schema_version ", schema_version, " is not supported (1..",
            kPolicySchemaVersion, ")");
  for (const auto& s : strict) {
    if (std::find(strict_assertions().begin(), strict_assertions().end(), s) ==
        strict_assertions().end()) {
      XRT_THROW(PolicyError,
                unknown_choice_message("strict assertion", s, "ExecutionPolicy", strict_assertions()));
    }
  }
  XRT_CHECK(threads >= 0, PolicyError, "ExecutionPolicy threads must be >= 0 (0 = default), got ",
            threads);
  XRT_CHECK(!(allow_fallback && has_strict("no_fallback")), PolicyError,
            "ExecutionPolicy allows fallback to '", to_string(*allow_fallback),
            "' but also asserts strict 'no_fallback'; drop one of them");
  XRT_CHECK(!(allow_fallback == Target::CPU && has_strict("no_cpu_fallback")), PolicyError,
            "ExecutionPolicy allows fallback to 'cpu' but also asserts strict 'no_cpu_fallback'; "
            "drop one of them");
  XRT_CHECK(!(allow_fallback == Target::Auto), PolicyError,
            "ExecutionPolicy allow_fallback must name a target (cpu, cuda, npu) or be None, "
            "not 'auto'");
  XRT_CHECK(!(allow_fallback && target != Target::Auto && *allow_fallback == target), PolicyError,
            "ExecutionPolicy allow_fallback '", to_string(*allow_fallback),
            "' equals the target; a fallback must be another target (or None)");
  XRT_CHECK(!engine || !engine->empty(), PolicyError,
            "ExecutionPolicy engine must be a name or None, not an empty string");
  std::set<std::string> seen;
  for (const auto& e : engines) {
    XRT_CHECK(!e.empty() && e.find('@') == std::string::npos, PolicyError,
              "ExecutionPolicy engines lists engine names (e.g. ['native', 'onnxruntime']), got '", e,
              "'; place single nodes with pins={'node or op type': 'engine@device'}");
    XRT_CHECK(seen.insert(e).second, PolicyError, "ExecutionPolicy engines names '", e,
              "' twice; list each engine once, in order of preference");
  }
  for (const auto& [key, place] : pins) {
    XRT_CHECK(!key.empty(), PolicyError, "ExecutionPolicy pins: a key is empty; a key is a node name or an op type");
    XRT_CHECK(valid_placement(place), PolicyError, "ExecutionPolicy pins['", key, "'] = '", place,
              "' is not 'engine' or 'engine@device' (e.g. 'onnxruntime@cpu')");
  }
  for (const auto& f : forbid) {
    XRT_CHECK(valid_placement(f), PolicyError, "ExecutionPolicy forbid entry '", f,
              "' is not a device kind, an engine or 'engine@device' (e.g. 'cpu', 'onnxruntime@cpu')");
    XRT_CHECK(!(allow_fallback && f == to_string(*allow_fallback)), PolicyError,
              "ExecutionPolicy allows fallback to '", f, "' but also forbids it; drop one of them");
  }
  XRT_CHECK(!max_islands || *max_islands >= 1, PolicyError,
            "ExecutionPolicy max_islands must be >= 1 (or None: no limit), got ", max_islands.value_or(0));
  XRT_CHECK(!max_fallback_nodes || *max_fallback_nodes >= 0, PolicyError,
            "ExecutionPolicy max_fallback_nodes must be >= 0 (or None: no limit), got ",
            max_fallback_nodes.value_or(0));
  XRT_CHECK(!max_copy_bytes || *max_copy_bytes >= 0, PolicyError,
            "ExecutionPolicy max_copy_bytes must be >= 0 (or None: no limit), got ",
            max_copy_bytes.value_or(0));
}

std::string ExecutionPolicy::to_json(int indent) const {
  nlohmann::json j;
  j["kind"] = kKind;
  j["schema_version"] = schema_version;
  j["target"] = std::string(to_string(target));
  j["precision"] = std::string(to_string(precision));
  j["static_shape"] = static_shape;
  j["allow_fallback"] =
      allow_fallback ? nlohmann::json(std::string(to_string(*allow_fallback))) : nlohmann::json();
  j["deterministic"] = deterministic;
  j["cuda_graph"] = cuda_graph;
  j["workspace_limit_bytes"] = workspace_limit_bytes;
  j["engine"] = engine ? nlohmann::json(*engine) : nlohmann::json();
  j["allow_tf32"] = allow_tf32;
  j["threads"] = threads;
  if (!keep_io_types) j["keep_io_types"] = false;  // only when set: unchanged fingerprints
  // Assertions are a set: the canonical form sorts them so order never changes a fingerprint.
  std::set<std::string> sorted(strict.begin(), strict.end());
  j["strict"] = std::vector<std::string>(sorted.begin(), sorted.end());
  // The orchestrator's fields only when set (see policy.h: unchanged fingerprints).
  if (!engines.empty()) j["engines"] = engines;  // an order: kept as given
  if (!pins.empty()) j["pins"] = pins;
  if (max_islands) j["max_islands"] = *max_islands;
  if (max_fallback_nodes) j["max_fallback_nodes"] = *max_fallback_nodes;
  if (max_copy_bytes) j["max_copy_bytes"] = *max_copy_bytes;
  if (!forbid.empty()) {
    std::set<std::string> f(forbid.begin(), forbid.end());
    j["forbid"] = std::vector<std::string>(f.begin(), f.end());
  }
  return j.dump(indent < 0 ? -1 : indent);
}

ExecutionPolicy ExecutionPolicy::from_json(std::string_view text) {
  nlohmann::json j = policy_json::parse_object(text, kWhat);
  ExecutionPolicy p;
  p.schema_version = policy_json::check_header(j, kWhat, kKind, fields());
  p.target = target_from_string(policy_json::get_string(j, "target", kWhat, "auto"));
  p.precision = precision_from_string(policy_json::get_string(j, "precision", kWhat, "fp32"));
  p.static_shape = policy_json::get_bool(j, "static_shape", kWhat, false);
  if (j.contains("allow_fallback") && !j["allow_fallback"].is_null()) {
    p.allow_fallback = target_from_string(policy_json::get_string(j, "allow_fallback", kWhat, ""));
  }
  p.deterministic = policy_json::get_bool(j, "deterministic", kWhat, false);
  p.cuda_graph = policy_json::get_bool(j, "cuda_graph", kWhat, false);
  long long ws = policy_json::get_int(j, "workspace_limit_bytes", kWhat, 0, 0);
  p.workspace_limit_bytes = static_cast<std::size_t>(ws);
  if (j.contains("engine") && !j["engine"].is_null()) {
    p.engine = policy_json::get_string(j, "engine", kWhat, "");
  }
  p.allow_tf32 = policy_json::get_bool(j, "allow_tf32", kWhat, false);
  p.threads = static_cast<int>(policy_json::get_int(j, "threads", kWhat, 0, 0, INT_MAX));
  p.keep_io_types = policy_json::get_bool(j, "keep_io_types", kWhat, true);
  if (j.contains("strict")) {
    XRT_CHECK(j["strict"].is_array(), PolicyError,
              "ExecutionPolicy field 'strict' must be a list of assertion names, got ",
              policy_json::quoted_json(j["strict"]));
    for (const auto& s : j["strict"]) {
      XRT_CHECK(s.is_string(), PolicyError, "ExecutionPolicy strict assertions are names, got ",
                policy_json::quoted_json(s));
      p.strict.push_back(s.get<std::string>());
    }
    // Assertions are a set: hold them sorted and unique, as to_json writes them, so a
    // policy read from a file equals the one written back from it.
    std::sort(p.strict.begin(), p.strict.end());
    p.strict.erase(std::unique(p.strict.begin(), p.strict.end()), p.strict.end());
  }
  p.engines = get_names(j, "engines");
  p.forbid = get_names(j, "forbid");
  std::sort(p.forbid.begin(), p.forbid.end());
  p.forbid.erase(std::unique(p.forbid.begin(), p.forbid.end()), p.forbid.end());
  if (j.contains("pins") && !j["pins"].is_null()) {
    XRT_CHECK(j["pins"].is_object(), PolicyError,
              "ExecutionPolicy field 'pins' must map node names or op types to 'engine@device', got ",
              policy_json::quoted_json(j["pins"]));
    for (const auto& [key, place] : j["pins"].items()) {
      XRT_CHECK(place.is_string(), PolicyError, "ExecutionPolicy pins['", key,
                "'] must be 'engine' or 'engine@device', got ", policy_json::quoted_json(place));
      p.pins[key] = place.get<std::string>();
    }
  }
  auto limit = [&](const char* field, long long lo, long long hi) -> std::optional<long long> {
    if (!j.contains(field) || j[field].is_null()) return std::nullopt;
    return policy_json::get_int(j, field, kWhat, 0, lo, hi);
  };
  if (auto v = limit("max_islands", 1, INT_MAX)) p.max_islands = static_cast<int>(*v);
  p.max_fallback_nodes = limit("max_fallback_nodes", 0, LLONG_MAX);
  p.max_copy_bytes = limit("max_copy_bytes", 0, LLONG_MAX);
  p.validate();
  return p;
}

std::string ExecutionPolicy::fingerprint() const { return sha256_hex(canonical_json()); }

std::string ExecutionPolicy::repr() const {
  std::ostringstream os;
  os << "ExecutionPolicy(target='" << to_string(target) << "', precision='"
     << to_string(precision) << "'";
  if (static_shape) os << ", static_shape=True";
  if (allow_fallback) os << ", allow_fallback='" << to_string(*allow_fallback) << "'";
  if (deterministic) os << ", deterministic=True";
  if (cuda_graph) os << ", cuda_graph=True";
  if (workspace_limit_bytes) os << ", workspace_limit_bytes=" << workspace_limit_bytes;
  if (engine) os << ", engine='" << *engine << "'";
  if (allow_tf32) os << ", allow_tf32=True";
  if (!keep_io_types) os << ", keep_io_types=False";
  if (threads) os << ", threads=" << threads;
  if (!strict.empty()) {
    std::set<std::string> sorted(strict.begin(), strict.end());
    os << ", strict=[";
    bool first = true;
    for (const auto& s : sorted) {
      os << (first ? "" : ", ") << "'" << s << "'";
      first = false;
    }
    os << "]";
  }
  auto names = [&](const char* field, const std::vector<std::string>& v) {
    if (v.empty()) return;
    os << ", " << field << "=[";
    for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", '" : "'") << v[i] << "'";
    os << "]";
  };
  names("engines", engines);
  if (!pins.empty()) {
    os << ", pins={";
    bool first = true;
    for (const auto& [k, v] : pins) {
      os << (first ? "'" : ", '") << k << "': '" << v << "'";
      first = false;
    }
    os << "}";
  }
  if (max_islands) os << ", max_islands=" << *max_islands;
  if (max_fallback_nodes) os << ", max_fallback_nodes=" << *max_fallback_nodes;
  if (max_copy_bytes) os << ", max_copy_bytes=" << *max_copy_bytes;
  const std::set<std::string> forbidden(forbid.begin(), forbid.end());
  names("forbid", std::vector<std::string>(forbidden.begin(), forbidden.end()));
  os << ")";
  return os.str();
}

}  // namespace xpuruntime
