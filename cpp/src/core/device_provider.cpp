// The one execution provider (device_provider.h): a device's plans run through the
// DeviceBackend's memory, copies, streams, events and graph capture.
#include "xpuruntime/device_provider.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "xpuruntime/checked.h"
#include "xpuruntime/error.h"
#include "xpuruntime/memory.h"
#include "xpuruntime/profiler.h"

namespace xpuruntime::graph {
namespace {

// Present tensors always have a non-null pointer, even when empty.
alignas(64) char g_empty[64];

// Streams handed to runs, kept for the process: a stream is never destroyed while
// the CachingAllocator may still hold blocks last used on it, and reusing streams
// keeps begin_run off the vendor's stream creation.
class StreamPool {
 public:
  explicit StreamPool(DeviceBackend& backend) : backend_(backend) {}
  NativeStream acquire(int device) {
    {
      std::lock_guard lock(mu_);
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->first == device) {
          NativeStream s = it->second;
          free_.erase(it);
          return s;
        }
      }
    }
    // The backend's streams: non-blocking where the device has a legacy default stream.
    return backend_.streams().create_stream(device, 0);
  }
  void give_back(int device, NativeStream s) {
    std::lock_guard lock(mu_);
    free_.emplace_back(device, s);
  }

 private:
  DeviceBackend& backend_;
  std::mutex mu_;
  std::vector<std::pair<int, NativeStream>> free_;
};

void record_copy(const char* direction, std::size_t bytes) {
  if (Profiler::instance().enabled()) Profiler::instance().record_copy(direction, bytes);
}

// The plan's own host bytes (shared, not copied): host-memory devices.
class HostConstants final : public DeviceConstants {
 public:
  explicit HostConstants(std::vector<HostTensor> constants) : constants_(std::move(constants)) {}
  void* data(int constant) const override {
    XRT_CHECK(constant >= 0 && constant < static_cast<int>(constants_.size()), InvalidArgumentError,
              "constant index ", constant, " is out of range (the plan has ", constants_.size(), ")");
    void* p = constants_[constant].data;
    return p ? p : g_empty;
  }

 private:
  std::vector<HostTensor> constants_;
};

// The plan constants in device memory, uploaded once and waited for (the executor
// reads them from every run's stream). All of them live in one block, each at a
// 256-byte aligned offset: the allocator rounds every block up to its size class (up
// to a quarter more below 16 MiB), which on GPT-2's 148 weights was 16.5 MB of
// device memory that held nothing; one block rounds once.
class UploadedConstants final : public DeviceConstants {
 public:
  UploadedConstants(DeviceBackend& backend, const std::vector<HostTensor>& constants,
                    const std::vector<bool>& read_on_device, const Device& device)
      : alloc_(MemoryManager::instance().allocator(device)) {
    constexpr std::size_t kAlign = 256;
    std::vector<std::size_t> offsets(constants.size(), 0);
    std::size_t total = 0;
    for (std::size_t i = 0; i < constants.size(); ++i) {
      // Only packed copies of it are read (PreparedKernel::packs_constant).
      if (i < read_on_device.size() && !read_on_device[i]) continue;
      offsets[i] = total;
      const std::size_t n = std::max<std::size_t>(constants[i].nbytes(), 1);
      XRT_CHECK(n <= kMaxAllocationBytes - total - kAlign, OutOfMemoryError,
                "the plan's constants need more bytes than any device holds");
      total += (n + kAlign - 1) / kAlign * kAlign;
    }
    if (total > 0) block_ = alloc_.allocate(total);
    ptrs_.assign(constants.size(), nullptr);
    try {
      for (std::size_t i = 0; i < constants.size(); ++i) {
        if (i < read_on_device.size() && !read_on_device[i]) continue;
        void* d = static_cast<char*>(block_) + offsets[i];
        ptrs_[i] = d;
        const HostTensor& c = constants[i];
        if (c.nbytes()) backend.copy(d, device, c.data, Device::cpu(), c.nbytes(), nullptr);
      }
      backend.streams().synchronize_stream(device.index, nullptr);
    } catch (...) {
      release();
      throw;
    }
  }
  ~UploadedConstants() override { release(); }
  UploadedConstants(const UploadedConstants&) = delete;
  UploadedConstants& operator=(const UploadedConstants&) = delete;

  void* data(int constant) const override {
    XRT_CHECK(constant >= 0 && constant < static_cast<int>(ptrs_.size()), InvalidArgumentError,
              "constant index ", constant, " is out of range (the plan has ", ptrs_.size(), ")");
    return ptrs_[constant];
  }

 private:
  void release() noexcept {
    if (block_ != nullptr) alloc_.free(block_);
    block_ = nullptr;
    ptrs_.clear();
  }

  CachingAllocator& alloc_;
  void* block_ = nullptr;
  std::vector<void*> ptrs_;
};

// One run: arena, workspace and dynamic buffers from the device's allocator on the
// run's stream (none on a host-memory device), edge copies on that stream.
class DeviceRun final : public RunResources {
 public:
  // `external`: the caller's stream (not pooled, not waited for at the end: the run's
  // blocks return to that stream's pool, so later work on it is ordered after this
  // run); nullptr: a pooled stream of the run's own (none on a host-memory device).
  DeviceRun(DeviceBackend& backend, StreamPool* pool, const Device& device, const DeviceTraits& traits,
            std::size_t arena_bytes, std::size_t workspace_bytes, NativeStream external = nullptr)
      : backend_(backend),
        pool_(pool),
        device_(device),
        traits_(traits),
        alloc_(MemoryManager::instance().allocator(device)),
        external_(external != nullptr) {
    stream_ = external_ ? external : (pool_ != nullptr ? pool_->acquire(device_.index) : nullptr);
    try {
      arena_ = alloc_.allocate(std::max<std::size_t>(arena_bytes, 64), stream_);
      if (workspace_bytes > 0) workspace_ = alloc_.allocate(workspace_bytes, stream_);
    } catch (...) {
      release_all();
      throw;
    }
  }
  ~DeviceRun() override { release_all(); }
  DeviceRun(const DeviceRun&) = delete;
  DeviceRun& operator=(const DeviceRun&) = delete;

  NativeStream stream() const override { return stream_; }
  void* arena() const override { return arena_; }
  void* workspace() const override { return workspace_; }
  void* allocate(std::size_t bytes) override {
    void* p = alloc_.allocate(std::max<std::size_t>(bytes, 1), stream_);
    live_.push_back(p);
    return p;
  }
  // Blocks are freed into the allocator's pool of the run's stream, so a later
  // allocation on this stream is ordered after the work that used them.
  void release(void* ptr) override {
    auto it = std::find(live_.begin(), live_.end(), ptr);
    if (it == live_.end()) return;
    live_.erase(it);
    alloc_.free(ptr);
  }
  // Host memory on both sides (host-memory devices): the executor never asks, but a
  // caller that does gets a correct copy. Else the backend's copy on the run's
  // stream, a profiler copy event each (pageable host memory is staged by the
  // driver: the host buffer may be reused as soon as the call returns).
  void copy_to_device(void* dst, const void* host_src, std::size_t bytes) override {
    edge_copy(dst, device_, host_src, Device::cpu(), bytes, "h2d");
  }
  void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override {
    edge_copy(host_dst, Device::cpu(), src, device_, bytes, "d2h");
  }
  void synchronize() override {
    if (!traits_.host_memory) backend_.streams().synchronize_stream(device_.index, stream_);
  }
  void copy_on_device(void* dst, const void* src, std::size_t bytes) override {
    if (traits_.host_memory) throw_no_device_memory();
    edge_copy(dst, device_, src, device_, bytes, "d2d");
  }
  void wait_for(NativeStream other) override {
    if (traits_.host_memory || other == nullptr || other == stream_) return;
    DeviceBackend::StreamOps& ops = backend_.streams();
    if (event_ == nullptr) event_ = ops.create_event(device_.index, /*enable_timing=*/false);
    ops.record_event(device_.index, event_, other);
    ops.stream_wait_event(device_.index, stream_, event_);
  }
  void signal(NativeStream other) override {
    if (traits_.host_memory || other == nullptr || other == stream_) return;
    DeviceBackend::StreamOps& ops = backend_.streams();
    if (done_ == nullptr) done_ = ops.create_event(device_.index, /*enable_timing=*/false);
    ops.record_event(device_.index, done_, stream_);
    ops.stream_wait_event(device_.index, other, done_);
  }
  void set_threads(int threads) override {
    if (threads <= 0 || thread_cap_ || !traits_.cap_threads) return;
    thread_cap_ = traits_.cap_threads(threads);
  }

 private:
  void edge_copy(void* dst, const Device& dst_dev, const void* src, const Device& src_dev, std::size_t bytes,
                 const char* direction) {
    if (traits_.host_memory) {
      if (bytes) std::memcpy(dst, src, bytes);
      return;
    }
    if (bytes == 0) {  // the backend skips it; the profiler still sees the edge
      record_copy(direction, 0);
      return;
    }
    backend_.copy(dst, dst_dev, src, src_dev, bytes, stream_);  // records the copy event
  }

  // Waits for the stream before its blocks return to the pool and the stream to
  // the next run: a run that threw mid-way may still have work in flight.
  void release_all() noexcept {
    thread_cap_.reset();
    const bool own_stream = stream_ != nullptr && !external_ && pool_ != nullptr;
    if (own_stream) {
      try {
        backend_.streams().synchronize_stream(device_.index, stream_);
      } catch (...) {  // a failed device: the blocks still go back
      }
    }
    for (NativeEvent* e : {&event_, &done_}) {
      if (*e != nullptr) backend_.streams().destroy_event(device_.index, *e);
      *e = nullptr;
    }
    for (void* p : live_) alloc_.free(p);
    live_.clear();
    if (workspace_) alloc_.free(workspace_);
    if (arena_) alloc_.free(arena_);
    workspace_ = arena_ = nullptr;
    if (own_stream) pool_->give_back(device_.index, stream_);
    stream_ = nullptr;
  }

  DeviceBackend& backend_;
  StreamPool* pool_;  // null on a host-memory device
  Device device_;
  const DeviceTraits& traits_;
  CachingAllocator& alloc_;
  bool external_ = false;
  NativeStream stream_ = nullptr;
  NativeEvent event_ = nullptr;  // wait_for's, created on first use
  NativeEvent done_ = nullptr;   // signal's, created on first use
  void* arena_ = nullptr;
  void* workspace_ = nullptr;
  std::vector<void*> live_;
  std::shared_ptr<void> thread_cap_;
};

class DeviceProvider final : public ExecutionProvider {
 public:
  DeviceProvider(DeviceBackend& backend, DeviceTraits traits)
      : backend_(backend), traits_(std::move(traits)), name_(backend.kind().name()), pool_(backend) {}

  const std::string& name() const override { return name_; }
  DeviceKind kernel_device() const override { return traits_.kernel_device.value_or(backend_.kind()); }
  Device device() const override { return Device{backend_.kind(), current_device()}; }
  int capability() const override {
    if (traits_.host_memory) return 0;
    const std::string cap = backend_.attribute(current_device(), "capability");
    int value = 0;
    std::from_chars(cap.data(), cap.data() + cap.size(), value);
    return value;
  }
  std::map<std::string, std::string> environment() const override {
    return traits_.environment ? traits_.environment(capability()) : std::map<std::string, std::string>{};
  }
  int target_capability(const std::string& target) const override {
    if (target.empty() || !traits_.target_capability) return ExecutionProvider::target_capability(target);
    return traits_.target_capability(target);
  }
  std::map<std::string, std::string> target_environment(const std::string& target) const override {
    const int capability = target_capability(target);
    return traits_.environment ? traits_.environment(capability) : std::map<std::string, std::string>{};
  }
  FusionSupport fusions() const override { return traits_.fusions ? traits_.fusions() : FusionSupport{}; }
  bool takes_epilogue(const std::string& op_type, const ops::Epilogue& e, DType dtype) const override {
    return traits_.takes_epilogue ? traits_.takes_epilogue(op_type, e, dtype)
                                  : ExecutionProvider::takes_epilogue(op_type, e, dtype);
  }
  bool host_memory() const override { return traits_.host_memory; }

  std::shared_ptr<const DeviceConstants> upload_constants(
      const std::vector<HostTensor>& constants,
      const std::vector<bool>& read_on_device) const override {
    if (traits_.host_memory) return std::make_shared<HostConstants>(constants);
    const Device dev = device();
    backend_.set_current(dev.index);
    return std::make_shared<UploadedConstants>(backend_, constants, read_on_device, dev);
  }
  std::unique_ptr<RunResources> begin_run(std::size_t arena_bytes, std::size_t workspace_bytes) const override {
    return start(arena_bytes, workspace_bytes, nullptr);
  }
  std::unique_ptr<RunResources> begin_run_on(NativeStream stream, std::size_t arena_bytes,
                                             std::size_t workspace_bytes) const override {
    if (traits_.host_memory) return ExecutionProvider::begin_run_on(stream, arena_bytes, workspace_bytes);
    return start(arena_bytes, workspace_bytes, stream);
  }
  DeviceBackend::GraphOps* graph_ops() const override {
    return traits_.host_memory ? nullptr : backend_.graphs();
  }

 private:
  std::unique_ptr<RunResources> start(std::size_t arena_bytes, std::size_t workspace_bytes,
                                      NativeStream external) const {
    if (traits_.host_memory) {
      if (traits_.on_begin_run) traits_.on_begin_run();  // on the thread that runs the plan
      return std::make_unique<DeviceRun>(backend_, nullptr, Device{backend_.kind(), 0}, traits_, arena_bytes,
                                         workspace_bytes);
    }
    const Device dev = device();
    // Kernels launch on the calling thread's current device: make it the one the
    // run's memory lives on.
    backend_.set_current(dev.index);
    return std::make_unique<DeviceRun>(backend_, &pool_, dev, traits_, arena_bytes, workspace_bytes, external);
  }

  // The backend's current device; throws BackendUnavailableError saying why when
  // the device kind cannot be used on this machine.
  int current_device() const {
    if (traits_.host_memory) return 0;
    if (backend_.device_count() <= 0) {
      std::string why = backend_.unavailable_reason();
      if (why.empty()) {
        std::string upper;
        for (char c : name_) upper += static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
        why = "no " + upper + " device was found";
      }
      XRT_THROW(BackendUnavailableError, "the native engine cannot compile or run a plan for device '", name_,
                "': ", why, "; ", traits_.unavailable_hint);
    }
    const int dev = backend_.current();
    return dev < 0 ? 0 : dev;
  }

  DeviceBackend& backend_;
  DeviceTraits traits_;
  std::string name_;
  mutable StreamPool pool_;
};

}  // namespace

std::shared_ptr<ExecutionProvider> make_device_provider(DeviceBackend& backend, DeviceTraits traits) {
  return std::make_shared<DeviceProvider>(backend, std::move(traits));
}

}  // namespace xpuruntime::graph
