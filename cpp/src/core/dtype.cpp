#include "xpuruntime/dtype.h"

#include <sstream>

#include <array>
#include <utility>

#include "xpuruntime/error.h"

namespace xpuruntime {
namespace {
struct DTypeEntry {
  DType type;
  std::string_view name;
  std::size_t size;
};
constexpr std::array<DTypeEntry, kNumDTypes> kTable{{
    {DType::kFloat32, "float32", 4},
    {DType::kFloat16, "float16", 2},
    {DType::kBFloat16, "bfloat16", 2},
    {DType::kFloat64, "float64", 8},
    {DType::kInt8, "int8", 1},
    {DType::kUInt8, "uint8", 1},
    {DType::kInt16, "int16", 2},
    {DType::kInt32, "int32", 4},
    {DType::kInt64, "int64", 8},
    {DType::kBool, "bool", 1},
    {DType::kFloat8E4M3, "float8_e4m3fn", 1},
    {DType::kFloat8E5M2, "float8_e5m2", 1},
}};
constexpr std::array<std::pair<std::string_view, DType>, 9> kAliases{{
    {"fp32", DType::kFloat32},
    {"float", DType::kFloat32},
    {"fp16", DType::kFloat16},
    {"half", DType::kFloat16},
    {"bf16", DType::kBFloat16},
    {"fp64", DType::kFloat64},
    {"double", DType::kFloat64},
    {"int", DType::kInt64},
    {"long", DType::kInt64},
}};
const DTypeEntry& entry(DType t) {
  auto i = static_cast<std::size_t>(t);
  XRT_CHECK(i < kTable.size(), InvalidArgumentError, "invalid dtype code ", i);
  return kTable[i];
}
}  // namespace

std::size_t dtype_size(DType t) { return entry(t).size; }
std::string_view dtype_name(DType t) { return entry(t).name; }

DType dtype_from_name(std::string_view name) {
  for (const auto& e : kTable)
    if (e.name == name) return e.type;
  for (const auto& [alias, t] : kAliases)
    if (alias == name) return t;
  std::string valid;
  for (const auto& e : kTable) valid += std::string(valid.empty() ? "" : ", ") + std::string(e.name);
  XRT_THROW(InvalidArgumentError, "unknown dtype '", name, "'; valid dtypes: ", valid);
}

bool dtype_is_floating(DType t) {
  switch (t) {
    case DType::kFloat32:
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kFloat64:
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2:
      return true;
    default:
      return false;
  }
}
bool dtype_is_integral(DType t) {
  switch (t) {
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
      return true;
    default:
      return false;
  }
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

}  // namespace xpuruntime
