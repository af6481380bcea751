#include "core/policy/policy_json.h"

#include <algorithm>

#include "xpuruntime/error.h"
#include "xpuruntime/policy.h"

namespace xpuruntime::policy_json {

nlohmann::json parse_object(std::string_view text, std::string_view what) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    XRT_THROW(PolicyError, "cannot parse ", what, " JSON: ", e.what(),
              "; check the file is valid JSON (or YAML through the Python API)");
  }
  XRT_CHECK(j.is_object(), PolicyError, what, " JSON must be an object, got ", j.type_name());
  return j;
}

int check_header(const nlohmann::json& j, std::string_view what, std::string_view kind,
                 const std::vector<std::string>& fields) {
  // The kind first: loading the wrong kind of file should say so, not list its fields.
  if (j.contains("kind")) {
    XRT_CHECK(j["kind"].is_string() && j["kind"].get<std::string>() == kind, PolicyError,
              "this is not a ", what, ": field 'kind' is ", j["kind"].dump(), ", expected \"",
              kind, "\"");
  }
  for (const auto& [key, value] : j.items()) {
    if (std::find(fields.begin(), fields.end(), key) == fields.end()) {
      XRT_THROW(PolicyError, unknown_choice_message("field", key, what, fields));
    }
  }
  int version = 1;  // files from before the version field (seed format) are version 1
  if (j.contains("schema_version")) {
    XRT_CHECK(j["schema_version"].is_number_integer(), PolicyError, what,
              " field 'schema_version' must be an integer, got ", j["schema_version"].dump());
    version = j["schema_version"].get<int>();
  }
  XRT_CHECK(version <= kPolicySchemaVersion, PolicyError, what, " was written by a newer ",
            "xpuruntime (schema_version ", version, ", this build reads up to ",
            kPolicySchemaVersion, "); upgrade xpuruntime to load it");
  XRT_CHECK(version >= 1, PolicyError, what, " has an invalid schema_version ", version,
            " (must be 1..", kPolicySchemaVersion, ")");
  return version;
}

bool get_bool(const nlohmann::json& j, const char* field, std::string_view what, bool fallback) {
  if (!j.contains(field)) return fallback;
  XRT_CHECK(j[field].is_boolean(), PolicyError, "field '", field, "' of ", what,
            " must be true or false, got ", j[field].dump());
  return j[field].get<bool>();
}

std::string get_string(const nlohmann::json& j, const char* field, std::string_view what,
                       const std::string& fallback) {
  if (!j.contains(field)) return fallback;
  XRT_CHECK(j[field].is_string(), PolicyError, "field '", field, "' of ", what,
            " must be a string, got ", j[field].dump());
  return j[field].get<std::string>();
}

long long get_int(const nlohmann::json& j, const char* field, std::string_view what,
                  long long fallback) {
  if (!j.contains(field)) return fallback;
  XRT_CHECK(j[field].is_number_integer(), PolicyError, "field '", field, "' of ", what,
            " must be an integer, got ", j[field].dump());
  return j[field].get<long long>();
}

}  // namespace xpuruntime::policy_json
