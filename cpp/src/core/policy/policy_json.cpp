#include "core/policy/policy_json.h"

#include <algorithm>

#include "xpuruntime/error.h"
#include "xpuruntime/policy.h"

namespace xpuruntime::policy_json {
namespace {

constexpr std::size_t kQuotedJsonBytes = 300;  // a message shows this much of a value
constexpr int kQuotedJsonDepth = 3;            // containers deeper than this: [...] / {...}

// Appends `v` to `out` until `out` reaches kQuotedJsonBytes; depth-bounded recursion.
void append_json(std::string& out, const nlohmann::json& v, int depth) {
  if (out.size() >= kQuotedJsonBytes) return;
  if (v.is_string()) {
    out += quote_input(v.get_ref<const std::string&>(), kQuotedJsonBytes / 2);
  } else if (v.is_array() || v.is_object()) {
    const bool obj = v.is_object();
    if (v.empty()) {
      out += obj ? "{}" : "[]";
      return;
    }
    if (depth >= kQuotedJsonDepth) {
      out += obj ? "{...}" : "[...]";
      return;
    }
    out += obj ? '{' : '[';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      if (out.size() >= kQuotedJsonBytes) {
        out += "...";
        break;
      }
      if (obj) {
        out += quote_input(it.key(), kQuotedJsonBytes / 2);
        out += ": ";
      }
      append_json(out, *it, depth + 1);
    }
    out += obj ? '}' : ']';
  } else {
    out += v.dump();  // a scalar: short and not recursive
  }
}

// The type a message names: "an integer" reads better than nlohmann's "number".
std::string type_of(const nlohmann::json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "float";
  return v.type_name();
}

}  // namespace

std::string quoted_json(const nlohmann::json& v) {
  std::string out;
  append_json(out, v, 0);
  return out + " (" + type_of(v) + ")";
}

nlohmann::json parse_object(std::string_view text, std::string_view what) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann quotes the token it was reading, which may be the whole (huge,
    // binary) input: keep the first part of its message only.
    XRT_THROW(PolicyError, "cannot parse ", what, " JSON at byte ", e.byte, ": ",
              quote_input(e.what(), 300),
              "; check the file is valid JSON in UTF-8 (or YAML through the Python API)");
  } catch (const nlohmann::json::exception& e) {
    // Not a parse_error but still the text's fault: a number past double's range
    // (1.5e320) is out_of_range 406. Found by fuzz/policy_json_fuzzer.cpp.
    XRT_THROW(PolicyError, "cannot read ", what, " JSON: ", quote_input(e.what(), 300),
              "; numbers in a policy must fit a 64-bit integer or a double");
  }
  XRT_CHECK(j.is_object(), PolicyError, what, " JSON must be an object, got ", j.type_name());
  return j;
}

int check_header(const nlohmann::json& j, std::string_view what, std::string_view kind,
                 const std::vector<std::string>& fields) {
  // The kind first: loading the wrong kind of file should say so, not list its fields.
  if (j.contains("kind")) {
    XRT_CHECK(j["kind"].is_string() && j["kind"].get<std::string>() == kind, PolicyError,
              "this is not a ", what, ": field 'kind' is ", quoted_json(j["kind"]),
              ", expected \"", kind, "\"");
  }
  for (const auto& [key, value] : j.items()) {
    if (std::find(fields.begin(), fields.end(), key) == fields.end()) {
      XRT_THROW(PolicyError, unknown_choice_message("field", key, what, fields));
    }
  }
  // Files from before the version field (seed format) are version 1. Read at full
  // width: an int would turn 2**32+1 into 1 and load a file from the future.
  long long version = get_int(j, "schema_version", what, 1);
  XRT_CHECK(version <= kPolicySchemaVersion, PolicyError, what, " was written by a newer ",
            "xpuruntime (schema_version ", version, ", this build reads up to ",
            kPolicySchemaVersion, "); upgrade xpuruntime to load it");
  XRT_CHECK(version >= 1, PolicyError, what, " has an invalid schema_version ", version,
            " (must be 1..", kPolicySchemaVersion, ")");
  return static_cast<int>(version);
}

bool get_bool(const nlohmann::json& j, const char* field, std::string_view what, bool fallback) {
  if (!j.contains(field)) return fallback;
  XRT_CHECK(j[field].is_boolean(), PolicyError, "field '", field, "' of ", what,
            " must be true or false, got ", quoted_json(j[field]));
  return j[field].get<bool>();
}

std::string get_string(const nlohmann::json& j, const char* field, std::string_view what,
                       const std::string& fallback) {
  if (!j.contains(field)) return fallback;
  XRT_CHECK(j[field].is_string(), PolicyError, "field '", field, "' of ", what,
            " must be a string, got ", quoted_json(j[field]));
  return j[field].get<std::string>();
}

long long get_int(const nlohmann::json& j, const char* field, std::string_view what,
                  long long fallback, long long min, long long max) {
  if (!j.contains(field)) return fallback;
  const nlohmann::json& v = j[field];
  XRT_CHECK(v.is_number_integer(), PolicyError, "field '", field, "' of ", what,
            " must be an integer, got ", quoted_json(v));
  // nlohmann stores every non-negative integer as unsigned (up to 2**64-1): compare
  // in that type before converting, or 2**63 would wrap to a negative value.
  bool in_range;
  if (v.is_number_unsigned()) {
    auto u = v.get<unsigned long long>();
    in_range = max >= 0 && u <= static_cast<unsigned long long>(max) &&
               (min <= 0 || u >= static_cast<unsigned long long>(min));
  } else {
    auto s = v.get<long long>();
    in_range = s >= min && s <= max;
  }
  XRT_CHECK(in_range, PolicyError, "field '", field, "' of ", what, " must be an integer in [",
            min, ", ", max, "], got ", v.dump());
  return v.get<long long>();
}

}  // namespace xpuruntime::policy_json
