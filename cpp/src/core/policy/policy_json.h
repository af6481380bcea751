// Shared helpers for reading policy JSON with useful errors (internal).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace xpuruntime::policy_json {

// Parses text into an object; PolicyError naming `what` on bad JSON or a non-object.
nlohmann::json parse_object(std::string_view text, std::string_view what);
// Checks schema_version (absent = 1) and that every key is one of `fields`.
int check_header(const nlohmann::json& j, std::string_view what, std::string_view kind,
                 const std::vector<std::string>& fields);
// Typed field access: PolicyError "field 'x' of <what> must be <type>, got <json>".
bool get_bool(const nlohmann::json& j, const char* field, std::string_view what, bool fallback);
std::string get_string(const nlohmann::json& j, const char* field, std::string_view what,
                       const std::string& fallback);
long long get_int(const nlohmann::json& j, const char* field, std::string_view what,
                  long long fallback);

}  // namespace xpuruntime::policy_json
