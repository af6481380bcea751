#include "backends/cuda/cuda_check.h"

namespace xpuruntime::cuda {

std::string cuda_error_text(cudaError_t err) {
  return detail::concat(cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
}

void throw_cuda_error(const char* call, cudaError_t err, const char* file, int line) {
  // Reset the non-sticky last error so it is reported once, here, not again later.
  (void)cudaGetLastError();
  const char* hint = "";
  switch (err) {
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
      hint = "; check the NVIDIA driver and that a GPU is visible (nvidia-smi, CUDA_VISIBLE_DEVICES)";
      break;
    case cudaErrorInvalidDevice:
      hint = "; the device index is out of range (xpuruntime.get_device_count())";
      break;
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
      hint = "; a kernel faulted and the CUDA context is unusable: restart the process "
             "(run with CUDA_LAUNCH_BLOCKING=1 to find the kernel)";
      break;
    default:
      break;
  }
  detail::throw_at<CudaError>(file, line, call, " failed: ", cuda_error_text(err), hint);
}

DeviceGuard::DeviceGuard(int index) {
  int current = -1;
  XRT_CUDA_CHECK(cudaGetDevice(&current));
  if (current != index) {
    XRT_CUDA_CHECK(cudaSetDevice(index));
    previous_ = current;
  }
}

DeviceGuard::DeviceGuard(int index, std::nothrow_t) noexcept {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  if (current != index) {
    if (cudaSetDevice(index) == cudaSuccess) {
      previous_ = current;
    } else {
      (void)cudaGetLastError();
    }
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
}

}  // namespace xpuruntime::cuda
