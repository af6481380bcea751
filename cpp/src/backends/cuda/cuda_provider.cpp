// The CUDA execution provider: device constants, a pooled stream per run, arena
// and dynamic buffers from the CUDA CachingAllocator, edge copies on the run's
// stream.
#include "backends/cuda/cuda_provider.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "xpuruntime/error.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/memory.h"
#include "xpuruntime/profiler.h"

namespace xpuruntime::cuda {
namespace {

// Streams handed to runs, kept for the process: a stream is never destroyed
// while the CachingAllocator may still hold blocks last used on it, and
// reusing streams keeps begin_run off cudaStreamCreate.
class StreamPool {
 public:
  cudaStream_t acquire(int device) {
    {
      std::lock_guard lock(mu_);
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->first == device) {
          cudaStream_t s = it->second;
          free_.erase(it);
          return s;
        }
      }
    }
    cudaStream_t s = nullptr;
    // Non-blocking, like the backend's own streams: no implicit ordering with
    // the legacy default stream.
    XRT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }
  void give_back(int device, cudaStream_t s) {
    std::lock_guard lock(mu_);
    free_.emplace_back(device, s);
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<int, cudaStream_t>> free_;
};

// The plan constants in device memory, uploaded once (synchronously: the
// executor reads them from every run's stream).
class CudaConstants final : public graph::DeviceConstants {
 public:
  CudaConstants(const std::vector<graph::HostTensor> &constants, int device)
      : alloc_(MemoryManager::instance().allocator(Device::cuda(device))) {
    ptrs_.reserve(constants.size());
    try {
      for (const graph::HostTensor &c : constants) {
        const std::size_t n = c.nbytes();
        void *d = alloc_.allocate(std::max<std::size_t>(n, 1));
        ptrs_.push_back(d);
        if (n) XRT_CUDA_CHECK(cudaMemcpy(d, c.data, n, cudaMemcpyHostToDevice));
      }
    } catch (...) {
      release_all();
      throw;
    }
  }
  ~CudaConstants() override { release_all(); }
  CudaConstants(const CudaConstants &) = delete;
  CudaConstants &operator=(const CudaConstants &) = delete;

  void *data(int constant) const override {
    XRT_CHECK(constant >= 0 && constant < static_cast<int>(ptrs_.size()), InvalidArgumentError,
              "constant index ", constant, " is out of range (the plan has ", ptrs_.size(), ")");
    return ptrs_[constant];
  }

 private:
  void release_all() noexcept {
    for (void *p : ptrs_) alloc_.free(p);
    ptrs_.clear();
  }

  CachingAllocator &alloc_;
  std::vector<void *> ptrs_;
};

class CudaRun final : public graph::RunResources {
 public:
  // `external`: the caller's stream (not pooled, not waited for at the end: the
  // run's blocks return to that stream's pool, so later work on it is ordered
  // after this run); nullptr: a pooled stream of the run's own.
  CudaRun(StreamPool &pool, int device, std::size_t arena_bytes, std::size_t workspace_bytes,
          cudaStream_t external = nullptr)
      : pool_(pool),
        device_(device),
        alloc_(MemoryManager::instance().allocator(Device::cuda(device))),
        external_(external != nullptr) {
    stream_ = external_ ? external : pool_.acquire(device_);
    try {
      arena_ = alloc_.allocate(std::max<std::size_t>(arena_bytes, 64), stream_);
      if (workspace_bytes > 0) workspace_ = alloc_.allocate(workspace_bytes, stream_);
    } catch (...) {
      release_all();
      throw;
    }
  }
  ~CudaRun() override { release_all(); }
  CudaRun(const CudaRun &) = delete;
  CudaRun &operator=(const CudaRun &) = delete;

  NativeStream stream() const override { return stream_; }
  void *arena() const override { return arena_; }
  void *workspace() const override { return workspace_; }
  void *allocate(std::size_t bytes) override {
    void *p = alloc_.allocate(std::max<std::size_t>(bytes, 1), stream_);
    live_.push_back(p);
    return p;
  }
  // Blocks are freed into the allocator's pool of the run's stream, so a later
  // allocation on this stream is ordered after the work that used them.
  void release(void *ptr) override {
    auto it = std::find(live_.begin(), live_.end(), ptr);
    if (it == live_.end()) return;
    live_.erase(it);
    alloc_.free(ptr);
  }
  // Pageable host memory: cudaMemcpyAsync stages it through the driver, so
  // the host buffer may be reused as soon as the call returns (host to device)
  // and the bytes are in place when it returns (device to host).
  // Each is a profiler copy event.
  void copy_to_device(void *dst, const void *host_src, std::size_t bytes) override {
    if (bytes)
      XRT_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
    if (Profiler::instance().enabled()) Profiler::instance().record_copy("h2d", bytes);
  }
  void copy_to_host(void *host_dst, const void *src, std::size_t bytes) override {
    if (bytes)
      XRT_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    if (Profiler::instance().enabled()) Profiler::instance().record_copy("d2h", bytes);
  }
  void synchronize() override { XRT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  void copy_on_device(void *dst, const void *src, std::size_t bytes) override {
    if (bytes)
      XRT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
    if (Profiler::instance().enabled()) Profiler::instance().record_copy("d2d", bytes);
  }
  void wait_for(NativeStream other) override {
    if (other == nullptr || other == stream_) return;
    if (event_ == nullptr) XRT_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    XRT_CUDA_CHECK(cudaEventRecord(event_, static_cast<cudaStream_t>(other)));
    XRT_CUDA_CHECK(cudaStreamWaitEvent(stream_, event_, 0));
  }

 private:
  // Waits for the stream before its blocks return to the pool and the stream to
  // the next run: a run that threw mid-way may still have work in flight.
  void release_all() noexcept {
    if (stream_ != nullptr && !external_) (void)cudaStreamSynchronize(stream_);
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
    event_ = nullptr;
    for (void *p : live_) alloc_.free(p);
    live_.clear();
    if (workspace_) alloc_.free(workspace_);
    if (arena_) alloc_.free(arena_);
    workspace_ = arena_ = nullptr;
    if (stream_ != nullptr && !external_) pool_.give_back(device_, stream_);
    stream_ = nullptr;
  }

  StreamPool &pool_;
  int device_;
  CachingAllocator &alloc_;
  bool external_ = false;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t event_ = nullptr;  // wait_for's, created on first use
  void *arena_ = nullptr;
  void *workspace_ = nullptr;
  std::vector<void *> live_;
};

// cudnnGetVersion() of the cuDNN this process loaded with the plugin, or "none".
// Looked up rather than called: the plugin builds without cuDNN where CMake found
// none (conv_cudnn_absent.cpp), and then the library is not linked.
std::string cudnn_version() {
  void* lib = dlopen("libcudnn.so.9", RTLD_LAZY | RTLD_NOLOAD);
  if (lib == nullptr) return "none";
  using GetVersion = std::size_t (*)();
  auto fn = reinterpret_cast<GetVersion>(dlsym(lib, "cudnnGetVersion"));
  const std::string v = fn != nullptr ? std::to_string(fn()) : std::string("none");
  dlclose(lib);
  return v;
}

class CudaProvider final : public graph::ExecutionProvider {
 public:
  explicit CudaProvider(CudaBackend &backend) : backend_(backend) {}

  const std::string &name() const override { return name_; }
  DeviceType kernel_device() const override { return DeviceType::kCUDA; }
  Device device() const override { return Device::cuda(current_device()); }
  int capability() const override {
    const DeviceInfo info = backend_.device_info(current_device());
    return info.compute_capability_major * 10 + info.compute_capability_minor;
  }
  // What a CUDA plan's kernels were chosen for: the GPU architecture (kernels are
  // built and algorithms tuned per architecture) and the versions of the libraries
  // whose algorithm ids and heuristics a plan records (cuBLASLt, cuDNN) or whose
  // kernels it runs (the CUDA runtime). A plan loads only where all four match.
  std::map<std::string, std::string> environment() const override {
    return environment_for(capability());
  }
  // An offline preview's target: "sm_90", "sm_90a", "90" or "9.0" (the
  // capability the kernels' supports() see); "" = this machine's GPU.
  int target_capability(const std::string &target) const override {
    if (target.empty()) return capability();
    std::string t = target;
    if (t.rfind("sm_", 0) == 0 || t.rfind("sm", 0) == 0) t = t.substr(t[2] == '_' ? 3 : 2);
    if (!t.empty() && t.back() == 'a') t.pop_back();  // sm_90a: the arch-specific target
    if (const auto dot = t.find('.'); dot != std::string::npos) t.erase(dot, 1);
    const bool digits = t.size() >= 2 && t.size() <= 3 &&
                        std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
    XRT_CHECK(digits && std::stoi(t) >= 50, InvalidArgumentError, "unknown CUDA target '",
              target, "': name a GPU architecture as sm_XY (e.g. sm_90 for H100/H200, sm_80 ",
              "for A100, sm_89 for L4/L40)");
    return std::stoi(t);
  }
  std::map<std::string, std::string> target_environment(const std::string &target) const override {
    return environment_for(target_capability(target));
  }
  // Batchnorm folding rewrites weights only. Elementwise chains fuse where the
  // CUDA FusedElementwise kernel (NVRTC) is registered. Epilogues: those
  // takes_epilogue() names, which the GEMM and cuDNN kernels apply.
  graph::FusionSupport fusions() const override {
    graph::FusionSupport f;
    f.fold_batchnorm = true;
    f.epilogues = true;
    f.elementwise_chains =
        !KernelRegistry::instance().list("fusedelementwise", DeviceType::kCUDA).empty();
    return f;
  }
  // cuBLASLt's epilogues for MatMul/Gemm: a bias row, Relu, and Gelu in its tanh form
  // (CUBLASLT_EPILOGUE_GELU is the tanh approximation; the exact erf form would round
  // differently), no residual. cuDNN's convolution (conv/conv_cudnn.cpp): a bias, a
  // residual and Relu. Float32, float16 and bfloat16 outputs.
  bool takes_epilogue(const std::string &op_type, const ops::Epilogue &e,
                      DType dtype) const override {
    if (dtype != DType::kFloat32 && dtype != DType::kFloat16 && dtype != DType::kBFloat16)
      return false;
    const bool relu = e.activation_op == "Relu";
    if (op_type == "MatMul" || op_type == "Gemm")
      return !e.residual && (!e.has_activation() || relu ||
                             (e.activation_op == "Gelu" && e.approximate == "tanh"));
    if (op_type == "Conv") return !e.has_activation() || relu;
    return false;
  }
  bool host_memory() const override { return false; }

  std::shared_ptr<const graph::DeviceConstants> upload_constants(
      const std::vector<graph::HostTensor> &constants) const override {
    const int dev = current_device();
    XRT_CUDA_CHECK(cudaSetDevice(dev));
    return std::make_shared<CudaConstants>(constants, dev);
  }
  std::unique_ptr<graph::RunResources> begin_run(std::size_t arena_bytes,
                                                 std::size_t workspace_bytes) const override {
    const int dev = current_device();
    // Kernels launch on the calling thread's current device: make it the one
    // the run's memory lives on.
    XRT_CUDA_CHECK(cudaSetDevice(dev));
    return std::make_unique<CudaRun>(pool_, dev, arena_bytes, workspace_bytes);
  }
  std::unique_ptr<graph::RunResources> begin_run_on(NativeStream stream, std::size_t arena_bytes,
                                                    std::size_t workspace_bytes) const override {
    const int dev = current_device();
    XRT_CUDA_CHECK(cudaSetDevice(dev));
    return std::make_unique<CudaRun>(pool_, dev, arena_bytes, workspace_bytes,
                                     static_cast<cudaStream_t>(stream));
  }
  DeviceBackend::GraphOps *graph_ops() const override { return backend_.graphs(); }

 private:
  // What a plan for GPU architecture `capability` records: the architecture and
  // the versions of this process's CUDA runtime, cuBLASLt and cuDNN (none of
  // which needs a device to answer).
  static std::map<std::string, std::string> environment_for(int capability) {
    int runtime = 0;
    XRT_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    return {{"gpu_arch", "sm_" + std::to_string(capability)},
            {"cuda_runtime", std::to_string(runtime)},
            {"cublaslt", std::to_string(cublasLtGetVersion())},
            {"cudnn", cudnn_version()}};
  }

  // The backend's current device; throws BackendUnavailableError saying why
  // when CUDA cannot be used on this machine.
  int current_device() const {
    if (backend_.device_count() <= 0) {
      std::string why = backend_.unavailable_reason();
      if (why.empty()) why = "no CUDA device was found";
      XRT_THROW(BackendUnavailableError,
                "the native engine cannot compile or run a plan for device 'cuda': ", why,
                "; run on a machine with an NVIDIA GPU and driver, or use "
                "device='cpu'");
    }
    const int dev = backend_.current();
    return dev < 0 ? 0 : dev;
  }

  CudaBackend &backend_;
  std::string name_ = "cuda";
  mutable StreamPool pool_;
};

}  // namespace

std::shared_ptr<graph::ExecutionProvider> make_cuda_provider(CudaBackend &backend) {
  return std::make_shared<CudaProvider>(backend);
}

}  // namespace xpuruntime::cuda
