// Element types. Values are stable (they are serialized into plans).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace xpuruntime {

enum class DType : uint8_t {
  kFloat32 = 0,
  kFloat16 = 1,
  kBFloat16 = 2,
  kFloat64 = 3,
  kInt8 = 4,
  kUInt8 = 5,
  kInt16 = 6,
  kInt32 = 7,
  kInt64 = 8,
  kBool = 9,
  kFloat8E4M3 = 10,  // storage only (e4m3fn)
  kFloat8E5M2 = 11,  // storage only
};

inline constexpr int kNumDTypes = 12;

// Size of one element in bytes.
std::size_t dtype_size(DType t);
// Canonical lower-case name: "float32", "float16", "bfloat16", ...
std::string_view dtype_name(DType t);
// Parses canonical names and common aliases ("fp32", "half", "bf16", "int", ...);
// throws InvalidArgumentError listing valid names otherwise.
DType dtype_from_name(std::string_view name);
bool dtype_is_floating(DType t);
bool dtype_is_integral(DType t);  // bool excluded

// A shape or stride list as text, "[2, 3]": the one spelling every message uses.
std::string shape_str(const std::vector<int64_t>& s);

}  // namespace xpuruntime
