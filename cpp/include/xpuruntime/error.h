// Typed errors of the runtime (DESIGN.md §10). Every class maps one-to-one to a
// Python exception of the same name (cpp/src/bindings/errors_binding.cpp).
// Messages say what failed, where, and how to fix it; XRT_CHECK adds file:line.
//
// Messages carry input we do not control (policy keys, model names, plan headers),
// and Python decodes every message as UTF-8: a raw byte 0xff in a message would turn
// the typed error into a UnicodeDecodeError. So messages quote input only through
// quote_input() (valid UTF-8, bounded), and every error's constructor
// repairs whatever slipped through (invalid bytes escaped as \xNN, length capped).
#pragma once

#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace xpuruntime {

// Longest slice of an offending value a message quotes (bytes of the original).
inline constexpr std::size_t kMaxQuotedBytes = 200;
// Longest message an error keeps; longer ones keep their head and tail.
inline constexpr std::size_t kMaxMessageBytes = 16384;

// `text` as valid UTF-8: well-formed sequences are kept, every other byte becomes
// "\xNN". Idempotent. Thread-safe (pure).
std::string to_valid_utf8(std::string_view text);

// Untrusted `value` made safe to embed in a message: wrapped in single quotes, valid
// UTF-8, control characters and invalid bytes escaped (\n, \t, \xNN), at most
// `max_bytes` of the value kept, with "... (N bytes)" when cut. Thread-safe (pure).
std::string quote_input(std::string_view value, std::size_t max_bytes = kMaxQuotedBytes);

namespace detail {

// The repository-relative part of a __FILE__ path ("cpp/src/core/x.cpp"): builds
// pass absolute or build-relative paths, and neither belongs in a user's message.
constexpr const char* source_path(const char* file) {
  constexpr std::string_view roots[] = {"cpp/", "tests/", "fuzz/", "benchmarks/"};
  std::string_view f(file);
  for (std::size_t i = 0; i < f.size(); ++i) {
    if (i != 0 && f[i - 1] != '/') continue;
    for (std::string_view r : roots) {
      if (f.substr(i, r.size()) == r) return file + i;
    }
  }
  return file;
}

// What the error constructors store: valid UTF-8, at most kMaxMessageBytes.
std::string sanitize_message(std::string_view msg);

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
template <typename E, typename... Args>
[[noreturn]] void throw_at(const char* file, int line, const Args&... args) {
  throw E(concat(args..., " [", source_path(file), ":", line, "]"));
}
}  // namespace detail

class XpuRuntimeError : public std::runtime_error {
 public:
  explicit XpuRuntimeError(const std::string& msg)
      : std::runtime_error(detail::sanitize_message(msg)) {}
};

// A CUDA runtime/driver/library call failed (the message names the call and code).
class CudaError : public XpuRuntimeError {
 public:
  using XpuRuntimeError::XpuRuntimeError;
};

// An allocation exceeded the device or the configured memory limit.
class OutOfMemoryError : public XpuRuntimeError {
 public:
  using XpuRuntimeError::XpuRuntimeError;
};

// No kernel/engine can run this case (names op, kernel and reason).
class UnsupportedOperationError : public XpuRuntimeError {
 public:
  using XpuRuntimeError::XpuRuntimeError;
};

// A caller passed a bad value (shape, dtype, device index, name...).
class InvalidArgumentError : public XpuRuntimeError {
 public:
  using XpuRuntimeError::XpuRuntimeError;
};

// A policy (KernelPolicy / ExecutionPolicy) is malformed or names unknown things.
class PolicyError : public XpuRuntimeError {
 public:
  using XpuRuntimeError::XpuRuntimeError;
};

// A model or plan file is malformed, inconsistent or from another version.
class InvalidModelError : public XpuRuntimeError {
 public:
  using XpuRuntimeError::XpuRuntimeError;
};

// A requested backend / engine is not installed or not usable on this machine.
class BackendUnavailableError : public XpuRuntimeError {
 public:
  using XpuRuntimeError::XpuRuntimeError;
};

// A locked session would decide differently from its lock file (policy, device,
// library version, model or a node's kernel changed), or a frozen session met a case
// its lock does not cover. Python attaches the field-by-field `.diff`.
class LockViolationError : public XpuRuntimeError {
 public:
  using XpuRuntimeError::XpuRuntimeError;
};

}  // namespace xpuruntime

// XRT_CHECK(cond, ErrorType, message parts...): throws ErrorType with the message
// followed by the repository-relative source location when cond is false.
#define XRT_CHECK(cond, ErrorType, ...)                                         \
  do {                                                                          \
    if (!(cond)) {                                                              \
      ::xpuruntime::detail::throw_at<::xpuruntime::ErrorType>(__FILE__, __LINE__, \
                                                              __VA_ARGS__);     \
    }                                                                           \
  } while (0)

#define XRT_THROW(ErrorType, ...) \
  ::xpuruntime::detail::throw_at<::xpuruntime::ErrorType>(__FILE__, __LINE__, __VA_ARGS__)
