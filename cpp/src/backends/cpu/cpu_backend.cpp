#include "backends/cpu/cpu_backend.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/host_copy.h"
#include "core/no_destructor.h"
#include "xpuruntime/error.h"
#include "xpuruntime/profiler.h"

namespace xpuruntime {
namespace {

constexpr std::size_t kHostAlignment = 64;  // a cache line; enough for AVX-512 loads

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "cpu";
}

int64_t host_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class CpuStreamOps final : public DeviceBackend::StreamOps {
 public:
  NativeStream create_stream(int, int) override {
    // Streams are identities only: work submitted to them runs inline.
    return reinterpret_cast<NativeStream>(next_stream_id_.fetch_add(1));
  }
  void destroy_stream(int, NativeStream) noexcept override {}
  void synchronize_stream(int, NativeStream) override {}
  bool query_stream(int, NativeStream) override { return true; }
  NativeEvent create_event(int, bool) override {
    auto ev = std::make_unique<int64_t>(0);
    NativeEvent handle = ev.get();
    std::lock_guard<std::mutex> lock(mu_);
    events_.emplace(handle, std::move(ev));
    return handle;
  }
  void destroy_event(int, NativeEvent e) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    events_.erase(e);
  }
  void record_event(int, NativeEvent e, NativeStream) override { *slot(e) = host_now_ns(); }
  void synchronize_event(int, NativeEvent) override {}
  bool query_event(int, NativeEvent) override { return true; }
  void stream_wait_event(int, NativeStream, NativeEvent) override {}
  float elapsed_ms(int, NativeEvent start, NativeEvent end) override {
    return static_cast<float>(*slot(end) - *slot(start)) / 1e6f;
  }

 private:
  int64_t* slot(NativeEvent e) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = events_.find(e);
    XRT_CHECK(it != events_.end(), InvalidArgumentError, "unknown CPU event handle");
    return it->second.get();
  }
  std::atomic<uintptr_t> next_stream_id_{1};
  std::mutex mu_;
  std::unordered_map<NativeEvent, std::unique_ptr<int64_t>> events_;
};

class CpuBackend final : public DeviceBackend {
 public:
  DeviceKind kind() const override { return DeviceKind::cpu(); }
  int device_count() const override { return 1; }
  DeviceInfo device_info(int index) const override {
    XRT_CHECK(index == 0, InvalidArgumentError, "CPU device index must be 0, got ", index);
    DeviceInfo info;
    info.device_id = 0;
    info.device_type = DeviceKind::cpu();
    info.name = cpu_model_name();
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES),
         page = sysconf(_SC_PAGE_SIZE);
    info.total_memory = static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
    info.free_memory = static_cast<std::size_t>(avail) * static_cast<std::size_t>(page);
    info.sm_count = static_cast<int>(std::thread::hardware_concurrency());
    info.supports_fp16 = true;  // as a storage type, computed in fp32
    info.supports_bf16 = true;
    info.supports_int8 = true;
    return info;
  }
  std::string unavailable_reason() const override { return ""; }
  void set_current(int index) override {
    XRT_CHECK(index == 0, InvalidArgumentError, "CPU device index must be 0, got ", index);
  }
  int current() const override { return 0; }
  void* raw_alloc(int, std::size_t bytes) override {
    std::size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    return std::aligned_alloc(kHostAlignment, rounded == 0 ? kHostAlignment : rounded);
  }
  void raw_free(int, void* ptr) noexcept override { std::free(ptr); }
  void* host_alloc(std::size_t bytes) override { return raw_alloc(0, bytes); }
  void host_free(void* ptr) noexcept override { std::free(ptr); }
  void copy(void* dst, const Device& dst_dev, const void* src, const Device& src_dev,
            std::size_t bytes, NativeStream) override {
    XRT_CHECK(dst_dev.is_cpu() && src_dev.is_cpu(), InvalidArgumentError,
              "the CPU backend copies host memory only (", src_dev.str(), " -> ", dst_dev.str(),
              ")");
    if (bytes) std::memcpy(dst, src, bytes);
    if (Profiler::instance().enabled()) Profiler::instance().record_copy("h2h", bytes);
  }
  void copy_strided(int, void* dst, std::span<const int64_t> dst_strides, const void* src,
                    std::span<const int64_t> src_strides, std::span<const int64_t> shape,
                    std::size_t elem_size, NativeStream) override {
    host_strided_copy(static_cast<char*>(dst), dst_strides, static_cast<const char*>(src), src_strides, shape,
                      elem_size);
  }
  void synchronize_device(int) override {}
  std::string attribute(int, std::string_view) const override { return ""; }  // no capability
  int dlpack_device_type() const override { return kDLPackCPU; }
  StreamOps& streams() override { return streams_; }

 private:
  CpuStreamOps streams_;
};

}  // namespace

DeviceBackend& cpu_backend() {
  static NoDestructor<CpuBackend> backend;  // process lifetime: no destruction-order races
  return backend.get();
}

}  // namespace xpuruntime
