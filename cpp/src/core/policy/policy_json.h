// Shared helpers for reading policy JSON with useful errors (internal).
#pragma once

#include <climits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace xpuruntime::policy_json {

// A JSON value made safe to embed in a message: at most a few hundred bytes, nested
// containers past a small depth shown as [...] / {...}, strings through quote_input().
// Never recursive past that depth, so a value nested 100k levels deep costs nothing
// (nlohmann's dump() recurses per level and overflows the stack there).
std::string quoted_json(const nlohmann::json& v);

// Parses text into an object; PolicyError naming `what` on bad JSON or a non-object.
nlohmann::json parse_object(std::string_view text, std::string_view what);
// Checks schema_version (absent = 1) and that every key is one of `fields`.
int check_header(const nlohmann::json& j, std::string_view what, std::string_view kind,
                 const std::vector<std::string>& fields);
// Typed field access: PolicyError "field 'x' of <what> must be <type>, got <json>".
bool get_bool(const nlohmann::json& j, const char* field, std::string_view what, bool fallback);
std::string get_string(const nlohmann::json& j, const char* field, std::string_view what,
                       const std::string& fallback);
// An integer in [min, max]; anything else (a float, 2**64, -1 for a count) is a
// PolicyError naming the range, never a silently truncated value.
long long get_int(const nlohmann::json& j, const char* field, std::string_view what,
                  long long fallback, long long min = LLONG_MIN, long long max = LLONG_MAX);

}  // namespace xpuruntime::policy_json
