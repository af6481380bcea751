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
      "allow_fallback", "allow_tf32", "cuda_graph",     "deterministic", "engine",
      "kind",           "precision",  "schema_version", "static_shape",  "strict",
      "target",         "threads",    "workspace_limit_bytes"};
  return f;
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
  // Assertions are a set: the canonical form sorts them so order never changes a fingerprint.
  std::set<std::string> sorted(strict.begin(), strict.end());
  j["strict"] = std::vector<std::string>(sorted.begin(), sorted.end());
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
  os << ")";
  return os.str();
}

}  // namespace xpuruntime
