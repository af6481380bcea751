// cuDNN plumbing of the cudnn Conv kernel: status checks that throw CudaError,
// pooled handles and descriptors owned by unique_ptr.
//
// Handles: a cuDNN handle carries a stream, so one serves one thread at a time.
// Each device keeps a pool; a run leases one (created on the current device, so
// lease under a DeviceGuard), sets the run's stream and returns it. Handles are
// never destroyed: destroying them from static destructors races the CUDA
// context's teardown at exit, and a process holds only as many as it had
// concurrent callers.
#pragma once

#include <cudnn.h>

#include <memory>

namespace xpuruntime::cudnn_conv {

// "call failed: <cuDNN's text> (status N) [file:line]" as CudaError.
[[noreturn]] void throw_cudnn(const char* call, cudnnStatus_t st, const char* file, int line);

#define XRT_CUDNN_CHECK(call)                                                          \
  do {                                                                                 \
    const cudnnStatus_t xrt_cudnn_st_ = (call);                                        \
    if (xrt_cudnn_st_ != CUDNN_STATUS_SUCCESS)                                         \
      ::xpuruntime::cudnn_conv::throw_cudnn(#call, xrt_cudnn_st_, __FILE__, __LINE__); \
  } while (0)

// Whether cuDNN refused a call's arguments or configuration (cuDNN 9 refines
// status codes into ranges: 2xxx bad parameter, 3xxx not supported), as opposed
// to failing while executing it.
inline bool refused(cudnnStatus_t st) {
  const int c = static_cast<int>(st);
  return c / 1000 == 2 || c / 1000 == 3;
}

class HandlePool;

// A handle of `device` for this scope.
class HandleLease {
 public:
  explicit HandleLease(int device);
  ~HandleLease();
  HandleLease(const HandleLease&) = delete;
  HandleLease& operator=(const HandleLease&) = delete;
  cudnnHandle_t get() const { return h_; }

 private:
  HandlePool& pool_;
  cudnnHandle_t h_;
};

template <typename T, cudnnStatus_t (*Destroy)(T)>
struct Deleter {
  void operator()(T d) const { Destroy(d); }
};
using TensorDesc = std::unique_ptr<cudnnTensorStruct,
                                   Deleter<cudnnTensorDescriptor_t, &cudnnDestroyTensorDescriptor>>;
using FilterDesc = std::unique_ptr<cudnnFilterStruct,
                                   Deleter<cudnnFilterDescriptor_t, &cudnnDestroyFilterDescriptor>>;
using ConvDesc =
    std::unique_ptr<cudnnConvolutionStruct,
                    Deleter<cudnnConvolutionDescriptor_t, &cudnnDestroyConvolutionDescriptor>>;
using ActDesc =
    std::unique_ptr<cudnnActivationStruct,
                    Deleter<cudnnActivationDescriptor_t, &cudnnDestroyActivationDescriptor>>;

}  // namespace xpuruntime::cudnn_conv
