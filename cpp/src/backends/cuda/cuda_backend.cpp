// CUDA backend: device discovery, device info, raw memory and copies.
// Streams/events/graphs are in cuda_streams.cpp.
#include "backends/cuda/cuda_backend.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_entries.h"
#include "backends/cuda/cuda_kind.h"
#include "xpuruntime/cuda_kernels_abi.h"
#include "xpuruntime/error.h"
#include "xpuruntime/profiler.h"

namespace xpuruntime::cuda {

std::string format_cuda_version(int v) {
  if (v <= 0) return "";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

CudaBackend::CudaBackend() {
  const cudaError_t err = cudaGetDeviceCount(&count_);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    count_ = 0;
    reason_ = "cudaGetDeviceCount failed: " + cuda_error_text(err);
    if (err == cudaErrorInsufficientDriver) {
      int runtime = 0;
      (void)cudaRuntimeGetVersion(&runtime);
      reason_ += "; no NVIDIA driver (or one older than this CUDA " +
                 format_cuda_version(runtime) + " runtime) is installed";
    }
  } else if (count_ == 0) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    reason_ = "cudaGetDeviceCount reported 0 devices";
    if (visible != nullptr) reason_ += std::string("; CUDA_VISIBLE_DEVICES='") + visible + "'";
  }
  info_cache_.resize(static_cast<std::size_t>(count_));
}

void CudaBackend::check_index(int index, const char* what) const {
  if (count_ == 0) {
    XRT_THROW(BackendUnavailableError, "CUDA ", what, " on cuda:", index,
              ": CUDA is unavailable (", reason_, "); use the cpu device or fix the driver");
  }
  if (index < 0 || index >= count_) {
    XRT_THROW(InvalidArgumentError, "CUDA ", what, ": device index ", index,
              " is out of range; this machine has ", count_, " CUDA device(s), cuda:0..cuda:",
              count_ - 1);
  }
}

DeviceInfo CudaBackend::static_info(int index) const {
  {
    std::lock_guard<std::mutex> lock(info_mu_);
    if (info_cache_[index]) return *info_cache_[index];
  }
  cudaDeviceProp prop{};
  XRT_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  DeviceInfo info;
  info.device_id = index;
  info.device_type = cuda::kind();
  info.name = prop.name;
  info.total_memory = prop.totalGlobalMem;
  info.compute_capability_major = prop.major;
  info.compute_capability_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  const int cc = prop.major * 10 + prop.minor;
  // Native half arithmetic from sm_53, bfloat16 tensor-core/arith support from
  // sm_80, int8 dot products (dp4a) from sm_61.
  info.supports_fp16 = cc >= 53;
  info.supports_bf16 = cc >= 80;
  info.supports_int8 = cc >= 61;
  int driver = 0, runtime = 0;
  XRT_CUDA_CHECK(cudaDriverGetVersion(&driver));
  XRT_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  info.driver_version = format_cuda_version(driver);
  info.runtime_version = format_cuda_version(runtime);
  char bus[64] = {};
  XRT_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, static_cast<int>(sizeof(bus)), index));
  info.pci_bus_id = bus;
  std::lock_guard<std::mutex> lock(info_mu_);
  info_cache_[index] = info;
  return info;
}

DeviceInfo CudaBackend::device_info(int index) const {
  check_index(index, "device_info");
  DeviceInfo info = static_info(index);
  DeviceGuard guard(index);  // cudaMemGetInfo reports on the current device
  std::size_t free_bytes = 0, total_bytes = 0;
  XRT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  info.free_memory = free_bytes;
  return info;
}

void CudaBackend::set_current(int index) {
  check_index(index, "set_current_device");
  XRT_CUDA_CHECK(cudaSetDevice(index));
}

int CudaBackend::current() const {
  if (count_ == 0) return -1;
  int index = 0;
  XRT_CUDA_CHECK(cudaGetDevice(&index));
  return index;
}

void* CudaBackend::raw_alloc(int index, std::size_t bytes) {
  check_index(index, "raw_alloc");
  DeviceGuard guard(index);
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, bytes);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it so the next call starts clean
    return nullptr;
  }
  if (err != cudaSuccess) {
    throw_cuda_error(detail::concat("cudaMalloc(", bytes, " bytes) on cuda:", index).c_str(), err,
                     __FILE__, __LINE__);
  }
  return ptr;
}

void CudaBackend::raw_free(int index, void* ptr) noexcept {
  if (ptr == nullptr || index < 0 || index >= count_) return;
  DeviceGuard guard(index, std::nothrow);
  const cudaError_t err = cudaFree(ptr);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    // At process exit the runtime may already be gone; the memory goes with it.
    if (err != cudaErrorCudartUnloading) {
      std::fprintf(stderr, "xpuruntime: cudaFree(%p) on cuda:%d failed: %s\n", ptr, index,
                   cuda_error_text(err).c_str());
    }
  }
}

void* CudaBackend::host_alloc(std::size_t bytes) {
  if (count_ == 0) {
    XRT_THROW(BackendUnavailableError, "pinned host memory needs CUDA, which is unavailable (",
              reason_, "); use ordinary host memory on this machine");
  }
  void* ptr = nullptr;
  const cudaError_t err = cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    XRT_THROW(OutOfMemoryError, "cudaHostAlloc could not pin ", bytes,
              " bytes of host memory; free pinned buffers or raise the locked-memory limit");
  }
  if (err != cudaSuccess) throw_cuda_error("cudaHostAlloc", err, __FILE__, __LINE__);
  return ptr;
}

void CudaBackend::host_free(void* ptr) noexcept {
  if (ptr == nullptr) return;
  const cudaError_t err = cudaFreeHost(ptr);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (err != cudaErrorCudartUnloading) {
      std::fprintf(stderr, "xpuruntime: cudaFreeHost(%p) failed: %s\n", ptr,
                   cuda_error_text(err).c_str());
    }
  }
}

namespace {
const char* copy_direction(const Device& dst, const Device& src) {
  if (!src.is_cpu()) return !dst.is_cpu() ? "d2d" : "d2h";
  return !dst.is_cpu() ? "h2d" : "h2h";
}
}  // namespace

void CudaBackend::copy(void* dst, const Device& dst_dev, const void* src, const Device& src_dev,
                       std::size_t bytes, NativeStream stream) {
  if (bytes == 0) return;
  XRT_CHECK(dst != nullptr && src != nullptr, InvalidArgumentError, "CUDA copy of ", bytes,
            " bytes from ", src_dev.str(), " to ", dst_dev.str(), " got a null pointer");
  if (dst_dev.is_cpu() && src_dev.is_cpu() && stream == nullptr) {
    std::memcpy(dst, src, bytes);  // host to host with no stream to order against
  } else {
    // Issued with the CUDA side's device current (the destination's when both are
    // CUDA): that selects the right legacy default stream for a null `stream`; a
    // created stream must belong to that device. (cudaStreamGetDevice would tell,
    // but it is not permitted on a capturing stream, and copies get captured.)
    if (!dst_dev.is_cpu()) check_index(dst_dev.index, "copy");
    if (!src_dev.is_cpu()) check_index(src_dev.index, "copy");
    const int index = !dst_dev.is_cpu() ? dst_dev.index : src_dev.index;
    check_index(index, "copy");  // host-to-host on a stream still needs a device
    DeviceGuard guard(index);
    XRT_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
  }
  Profiler& profiler = Profiler::instance();
  if (profiler.enabled()) profiler.record_copy(copy_direction(dst_dev, src_dev), bytes);
}

void CudaBackend::copy_strided(int index, void* dst, std::span<const int64_t> dst_strides, const void* src,
                               std::span<const int64_t> src_strides, std::span<const int64_t> shape,
                               std::size_t elem_size, NativeStream stream) {
  (void)index;  // the kernel runs on `stream`, which belongs to the device
  char err[512] = {0};
  cuda_kernels::throw_kernel_status(
      strided_copy_entry(dst, src, static_cast<int32_t>(shape.size()), shape.data(), dst_strides.data(),
                         src_strides.data(), static_cast<int32_t>(elem_size), stream, err, sizeof(err)),
      err);
}

std::string CudaBackend::attribute(int index, std::string_view key) const {
  if (key == "host_memory") return "pinned";  // host_alloc is cudaMallocHost
  if (key != "capability" && key != "arch") return "";
  check_index(index, "attribute");
  const DeviceInfo info = static_info(index);
  const int cc = info.compute_capability_major * 10 + info.compute_capability_minor;
  return key == "capability" ? std::to_string(cc) : "sm" + std::to_string(cc);
}

DeviceBackend::DLPackRole CudaBackend::dlpack_role(int dl_device_type) const {
  // dlpack.h: kDLCUDA 2, kDLCUDAHost 3 (pinned host memory), kDLCUDAManaged 13.
  if (dl_device_type == 2 || dl_device_type == 13) return DLPackRole::kDevice;
  if (dl_device_type == 3) return DLPackRole::kHost;
  return DLPackRole::kNone;
}

void CudaBackend::synchronize_device(int index) {
  check_index(index, "synchronize");
  DeviceGuard guard(index);
  XRT_CUDA_CHECK(cudaDeviceSynchronize());  // the core records the sync in the Profiler
}

}  // namespace xpuruntime::cuda
