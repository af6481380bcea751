// Typed errors of the runtime (DESIGN.md §9). Every class maps one-to-one to a
// Python exception of the same name (cpp/src/bindings/errors_binding.cpp).
// Messages say what failed, where, and how to fix it; XRT_CHECK adds file:line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace xpuruntime {

class XpuRuntimeError : public std::runtime_error {
 public:
  explicit XpuRuntimeError(const std::string& msg) : std::runtime_error(msg) {}
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

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
template <typename E, typename... Args>
[[noreturn]] void throw_at(const char* file, int line, const Args&... args) {
  throw E(concat(args..., " [", file, ":", line, "]"));
}
}  // namespace detail

}  // namespace xpuruntime

// XRT_CHECK(cond, ErrorType, message parts...): throws ErrorType with the message
// followed by the source location when cond is false.
#define XRT_CHECK(cond, ErrorType, ...)                                         \
  do {                                                                          \
    if (!(cond)) {                                                              \
      ::xpuruntime::detail::throw_at<::xpuruntime::ErrorType>(__FILE__, __LINE__, \
                                                              __VA_ARGS__);     \
    }                                                                           \
  } while (0)

#define XRT_THROW(ErrorType, ...) \
  ::xpuruntime::detail::throw_at<::xpuruntime::ErrorType>(__FILE__, __LINE__, __VA_ARGS__)
