// The CPU execution provider: host memory throughout, nothing to copy.
#include "backends/cpu/cpu_provider.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/kernels/parallel.h"
#include "xpuruntime/error.h"
#include "xpuruntime/host_threads.h"
#include "xpuruntime/memory.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace xpuruntime::cpu {
namespace {

// Present tensors always have a non-null pointer, even when empty.
alignas(64) char g_empty[64];

// The plan's own host bytes (shared, not copied).
class HostConstants final : public graph::DeviceConstants {
 public:
  explicit HostConstants(std::vector<graph::HostTensor> constants)
      : constants_(std::move(constants)) {}
  void* data(int constant) const override {
    XRT_CHECK(constant >= 0 && constant < static_cast<int>(constants_.size()), InvalidArgumentError,
              "constant index ", constant, " is out of range (the plan has ", constants_.size(),
              ")");
    void* p = constants_[constant].data;
    return p ? p : g_empty;
  }

 private:
  std::vector<graph::HostTensor> constants_;
};

class CpuRun final : public graph::RunResources {
 public:
  CpuRun(CachingAllocator& alloc, std::size_t arena_bytes, std::size_t workspace_bytes)
      : alloc_(alloc) {
    arena_ = alloc_.allocate(std::max<std::size_t>(arena_bytes, 64));
    if (workspace_bytes > 0) workspace_ = alloc_.allocate(workspace_bytes);
  }
  ~CpuRun() override {
    restore_threads();
    for (void* p : live_) alloc_.free(p);
    if (workspace_) alloc_.free(workspace_);
    alloc_.free(arena_);
  }
  CpuRun(const CpuRun&) = delete;
  CpuRun& operator=(const CpuRun&) = delete;

  NativeStream stream() const override { return nullptr; }
  void* arena() const override { return arena_; }
  void* workspace() const override { return workspace_; }
  void* allocate(std::size_t bytes) override {
    void* p = alloc_.allocate(std::max<std::size_t>(bytes, 1));
    live_.push_back(p);
    return p;
  }
  void release(void* ptr) override {
    auto it = std::find(live_.begin(), live_.end(), ptr);
    if (it == live_.end()) return;
    live_.erase(it);
    alloc_.free(ptr);
  }
  // Host memory on both sides: the executor never asks (host_memory() is true),
  // but a caller that does gets a correct copy.
  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void synchronize() override {}
  // ExecutionPolicy.threads for this run, on the calling thread: the parallel loops'
  // cap. Only our pool's count changes: the GEMM kernels run OpenBLAS single-threaded
  // inside each piece of the pool's split (ops/gemm.cpp run_gemm), and oneDNN gets the
  // cap as its OpenMP team around each primitive (onednn_context.h). Raising
  // OpenBLAS's own threads here would let its spinning workers fight the pool's
  // helpers and serialize concurrent callers on its lock: measured on bert_base at 2
  // threads, 2.2x slower per run than the same plan without the policy.
  void set_threads(int threads) override {
    if (threads <= 0 || cap_) return;
    cap_.emplace(threads);
  }

 private:
  void restore_threads() { cap_.reset(); }

  CachingAllocator& alloc_;
  void* arena_ = nullptr;
  void* workspace_ = nullptr;
  std::vector<void*> live_;
  std::optional<ThreadCap> cap_;
};

class CpuProvider final : public graph::ExecutionProvider {
 public:
  const std::string& name() const override { return name_; }
  DeviceType kernel_device() const override { return DeviceType::kCPU; }
  Device device() const override { return Device::cpu(); }
  bool host_memory() const override { return true; }
  std::shared_ptr<const graph::DeviceConstants> upload_constants(
      const std::vector<graph::HostTensor>& constants) const override {
    return std::make_shared<HostConstants>(constants);
  }
  std::unique_ptr<graph::RunResources> begin_run(std::size_t arena_bytes,
                                                 std::size_t workspace_bytes) const override {
#ifdef _OPENMP
    // The team size is an ICV of the calling thread: each run sets its own.
    const char* env = std::getenv("XRT_NUM_THREADS");
    const long long n = env ? std::strtoll(env, nullptr, 10) : 0;
    if (n > 0) omp_set_num_threads(clamp_host_threads(n));
#endif
    return std::make_unique<CpuRun>(MemoryManager::instance().allocator(Device::cpu()), arena_bytes,
                                    workspace_bytes);
  }

 private:
  std::string name_ = "cpu";
};

}  // namespace

std::shared_ptr<graph::ExecutionProvider> make_cpu_provider() {
  return std::make_shared<CpuProvider>();
}

}  // namespace xpuruntime::cpu
