// The CUDA device backend (DESIGN.md §2): raw device memory, pinned host memory,
// copies, streams, events and graph capture on NVIDIA GPUs through the CUDA
// runtime. Built into the plugin libxpuruntime_cuda.so, created once by
// xpuruntime_plugin_init and never destroyed (caching allocators in the core
// may still free blocks from static destructors at exit).
//
// Without a driver or a GPU the backend still constructs: device_count() is 0
// and unavailable_reason() says why. Every method is thread-safe; the current
// device is per thread (cudaSetDevice), calls on a given index switch to it with a
// DeviceGuard and switch back.
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/cuda_kind.h"
#include "xpuruntime/backend.h"

namespace xpuruntime::cuda {

class CudaBackend;

// Streams are created non-blocking (like torch's side streams): they do not
// synchronize implicitly with the legacy default (null) stream; use events.
class CudaStreamOps final : public DeviceBackend::StreamOps {
 public:
  explicit CudaStreamOps(const CudaBackend& backend) : backend_(backend) {}
  NativeStream create_stream(int index, int priority) override;
  void destroy_stream(int index, NativeStream s) noexcept override;
  void synchronize_stream(int index, NativeStream s) override;
  bool query_stream(int index, NativeStream s) override;
  NativeEvent create_event(int index, bool enable_timing) override;
  void destroy_event(int index, NativeEvent e) noexcept override;
  void record_event(int index, NativeEvent e, NativeStream s) override;
  void synchronize_event(int index, NativeEvent e) override;
  bool query_event(int index, NativeEvent e) override;
  void stream_wait_event(int index, NativeStream s, NativeEvent e) override;
  float elapsed_ms(int index, NativeEvent start, NativeEvent end) override;

 private:
  const CudaBackend& backend_;
};

// CUDA graphs: capture in cudaStreamCaptureModeThreadLocal (other threads may keep
// using CUDA freely while one thread captures), instantiate at end_capture.
class CudaGraphOps final : public DeviceBackend::GraphOps {
 public:
  explicit CudaGraphOps(const CudaBackend& backend) : backend_(backend) {}
  void begin_capture(int index, NativeStream s) override;
  NativeGraph end_capture(int index, NativeStream s) override;
  void launch(int index, NativeGraph g, NativeStream s) override;
  void destroy(int index, NativeGraph g) noexcept override;
  bool is_capturing(int index, NativeStream s) override;

 private:
  const CudaBackend& backend_;
};

class CudaBackend final : public DeviceBackend {
 public:
  CudaBackend();  // never throws: a failed probe is recorded in unavailable_reason()
  DeviceKind kind() const override { return ::xpuruntime::cuda::kind(); }
  int device_count() const override { return count_; }
  DeviceInfo device_info(int index) const override;
  std::string unavailable_reason() const override { return reason_; }
  void set_current(int index) override;
  int current() const override;  // -1 when there is no CUDA device
  void* raw_alloc(int index, std::size_t bytes) override;
  void raw_free(int index, void* ptr) noexcept override;
  void* host_alloc(std::size_t bytes) override;
  void host_free(void* ptr) noexcept override;
  void copy(void* dst, const Device& dst_dev, const void* src, const Device& src_dev,
            std::size_t bytes, NativeStream stream) override;
  // The strided copy kernel (strided_copy.cu): up to 8 dimensions.
  void copy_strided(int index, void* dst, std::span<const int64_t> dst_strides, const void* src,
                    std::span<const int64_t> src_strides, std::span<const int64_t> shape,
                    std::size_t elem_size, NativeStream stream) override;
  void synchronize_device(int index) override;
  // "capability" (90 for sm_90), "arch" ("sm90"), "host_memory" ("pinned").
  std::string attribute(int index, std::string_view key) const override;
  int dlpack_device_type() const override { return 2; }  // kDLCUDA
  DLPackRole dlpack_role(int dl_device_type) const override;
  StreamOps& streams() override { return streams_; }
  GraphOps* graphs() override { return &graphs_; }

  // Throws InvalidArgumentError (or BackendUnavailableError when CUDA is unusable)
  // unless 0 <= index < device_count(); `what` names the operation for the message.
  void check_index(int index, const char* what) const;

 private:
  DeviceInfo static_info(int index) const;  // cached; everything but free_memory

  int count_ = 0;
  std::string reason_;
  mutable std::mutex info_mu_;
  mutable std::vector<std::optional<DeviceInfo>> info_cache_;
  CudaStreamOps streams_{*this};
  CudaGraphOps graphs_{*this};
};

// "13.0" from the integer form 13000 that cudaDriverGetVersion reports.
std::string format_cuda_version(int v);

}  // namespace xpuruntime::cuda
