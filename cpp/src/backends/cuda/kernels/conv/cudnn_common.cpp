// See cudnn_common.h.
#include "backends/cuda/kernels/conv/cudnn_common.h"

#include <mutex>
#include <vector>

#include "xpuruntime/error.h"

namespace xpuruntime::cudnn_conv {

void throw_cudnn(const char* call, cudnnStatus_t st, const char* file, int line) {
  XRT_THROW(CudaError, call, " failed: ", cudnnGetErrorString(st), " (status ",
            static_cast<int>(st), ") [", file, ":", line, "]");
}

class HandlePool {
 public:
  static HandlePool& of(int device) {
    static std::mutex mu;
    static auto* pools = new std::vector<std::unique_ptr<HandlePool>>();  // leaked: see header
    std::lock_guard lock(mu);
    if (device >= static_cast<int>(pools->size())) pools->resize(device + 1);
    auto& p = (*pools)[device];
    if (!p) p = std::make_unique<HandlePool>();
    return *p;
  }
  cudnnHandle_t acquire() {
    {
      std::lock_guard lock(mu_);
      if (!free_.empty()) {
        cudnnHandle_t h = free_.back();
        free_.pop_back();
        return h;
      }
    }
    cudnnHandle_t h = nullptr;
    XRT_CUDNN_CHECK(cudnnCreate(&h));  // on the current device (the caller's guard)
    return h;
  }
  void release(cudnnHandle_t h) {
    std::lock_guard lock(mu_);
    free_.push_back(h);
  }

 private:
  std::mutex mu_;
  std::vector<cudnnHandle_t> free_;
};

HandleLease::HandleLease(int device) : pool_(HandlePool::of(device)), h_(pool_.acquire()) {}
HandleLease::~HandleLease() { pool_.release(h_); }

}  // namespace xpuruntime::cudnn_conv
