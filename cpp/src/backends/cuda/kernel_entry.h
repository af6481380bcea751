// The plugin side of the kernel C ABI (xpuruntime/cuda_kernels_abi.h): one wrapper
// that runs a launcher and turns whatever it throws into a KernelStatus and a
// message, so no exception crosses the plugin boundary. Every kernel family's
// entry points use it.
#pragma once

#include <cstddef>
#include <cstring>
#include <exception>

#include "xpuruntime/cuda_kernels_abi.h"
#include "xpuruntime/error.h"

namespace xpuruntime::cuda_kernels {

inline KernelStatus report_status(const char* what, KernelStatus status, char* err,
                                  std::size_t err_len) noexcept {
  if (err != nullptr && err_len > 0) {
    std::strncpy(err, what != nullptr ? what : "", err_len - 1);
    err[err_len - 1] = '\0';
  }
  return status;
}

// Runs fn(); kOk when it returns, else the status of the typed error it threw.
template <typename Fn>
KernelStatus guarded(Fn&& fn, char* err, std::size_t err_len) noexcept {
  try {
    fn();
    return KernelStatus::kOk;
  } catch (const InvalidArgumentError& e) {
    return report_status(e.what(), KernelStatus::kInvalidArgument, err, err_len);
  } catch (const UnsupportedOperationError& e) {
    return report_status(e.what(), KernelStatus::kUnsupported, err, err_len);
  } catch (const OutOfMemoryError& e) {
    return report_status(e.what(), KernelStatus::kOutOfMemory, err, err_len);
  } catch (const std::exception& e) {
    return report_status(e.what(), KernelStatus::kCudaFailure, err, err_len);
  } catch (...) {
    return report_status("unknown exception in a CUDA kernel entry", KernelStatus::kCudaFailure, err,
                         err_len);
  }
}

}  // namespace xpuruntime::cuda_kernels
