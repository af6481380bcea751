// Checked size arithmetic (issue 19 §3). Every allocation size and every shape
// product goes through these helpers, so a request that does not fit the type is a
// typed error, never a wrapped small number: before them, raw_alloc(2**64-1) rounded
// up to a 0-byte size class and handed out a valid pointer to a tiny block.
//
// try_* return std::nullopt on overflow; checked_* throw ErrorType (default
// InvalidArgumentError) with `what` naming the quantity. All are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>

#include "xpuruntime/error.h"

namespace xpuruntime {

// Largest block any allocator hands out (4 EiB): far above every device, and low
// enough that rounding it up to a size class or adding it to a total cannot wrap.
inline constexpr std::size_t kMaxAllocationBytes = std::size_t{1} << 62;

template <typename T>
constexpr std::optional<T> try_mul(T a, T b) {
  static_assert(std::is_integral_v<T>);
  T out{};
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

template <typename T>
constexpr std::optional<T> try_add(T a, T b) {
  static_assert(std::is_integral_v<T>);
  T out{};
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

template <typename ErrorType = InvalidArgumentError, typename T>
T checked_mul(T a, T b, std::string_view what) {
  std::optional<T> r = try_mul(a, b);
  if (!r) {
    detail::throw_at<ErrorType>(__FILE__, __LINE__, what, " overflows: ", a, " * ", b,
                                " does not fit in a 64-bit size; check the sizes given");
  }
  return *r;
}

template <typename ErrorType = InvalidArgumentError, typename T>
T checked_add(T a, T b, std::string_view what) {
  std::optional<T> r = try_add(a, b);
  if (!r) {
    detail::throw_at<ErrorType>(__FILE__, __LINE__, what, " overflows: ", a, " + ", b,
                                " does not fit in a 64-bit size; check the sizes given");
  }
  return *r;
}

// `bytes` rounded up to a multiple of `align` (> 0); std::nullopt when that wraps.
constexpr std::optional<std::size_t> try_round_up(std::size_t bytes, std::size_t align) {
  std::optional<std::size_t> padded = try_add(bytes, align - 1);
  if (!padded) return std::nullopt;
  return *padded / align * align;
}

// The number of elements of `shape`: InvalidArgumentError naming `what` for a
// negative dimension or a product past int64.
int64_t checked_numel(std::span<const int64_t> shape, std::string_view what);

// The bytes of `shape` elements of `element_size` bytes each, as checked_numel, and
// InvalidArgumentError when the product passes kMaxAllocationBytes.
std::size_t checked_nbytes(std::span<const int64_t> shape, std::size_t element_size,
                           std::string_view what);

}  // namespace xpuruntime
