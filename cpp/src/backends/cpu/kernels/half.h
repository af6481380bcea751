// fp16 / bf16 scalar conversions for the CPU op kernels (the matmul kernels' exact,
// round-to-nearest-even versions, re-exported under the ops namespace).
#pragma once

#include <type_traits>

#include "core/half_float.h"

namespace xpuruntime::cpu {
using matmul::bf16_to_float;
using matmul::float_to_bf16;
using matmul::float_to_half;
using matmul::half_to_float;
}  // namespace xpuruntime::cpu

namespace xpuruntime::cpu {
// Arithmetic type and conversions of a storage type: 16-bit floats compute in
// float, everything else in itself.
template <typename T>
struct Num {
  using C = T;
  static C load(T v) { return v; }
  static T store(C v) { return v; }
};
template <>
struct Num<matmul::Half> {
  using C = float;
  static C load(matmul::Half v) { return half_to_float(v.bits); }
  static matmul::Half store(C v) { return {float_to_half(v)}; }
};
template <>
struct Num<matmul::BFloat16> {
  using C = float;
  static C load(matmul::BFloat16 v) { return bf16_to_float(v.bits); }
  static matmul::BFloat16 store(C v) { return {float_to_bf16(v)}; }
};
template <typename T>
inline constexpr bool kIsFloat = std::is_floating_point_v<T> || std::is_same_v<T, matmul::Half> ||
                                 std::is_same_v<T, matmul::BFloat16>;
}  // namespace xpuruntime::cpu
