// The null device's backend (null_backend.h).
#include "backends/null/null_backend.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "xpuruntime/error.h"
#include "xpuruntime/profiler.h"

namespace xpuruntime::null_device {
namespace {

constexpr std::size_t kAlignment = 64;
constexpr int kDLExtDev = 12;  // dlpack.h: "reserved extension device type, used to test extension devices"

bool enabled() {
  const char* env = std::getenv("XRT_NULL_DEVICE");
  return env != nullptr && std::strcmp(env, "1") == 0;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Streams are identities: work submitted to them runs inline, so in order. Events
// are host timestamps taken when recorded.
class NullStreamOps final : public DeviceBackend::StreamOps {
 public:
  NativeStream create_stream(int, int) override { return reinterpret_cast<NativeStream>(next_.fetch_add(1)); }
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
  void record_event(int, NativeEvent e, NativeStream) override { *static_cast<int64_t*>(e) = now_ns(); }
  void synchronize_event(int, NativeEvent) override {}
  bool query_event(int, NativeEvent) override { return true; }
  void stream_wait_event(int, NativeStream, NativeEvent) override {}
  float elapsed_ms(int, NativeEvent start, NativeEvent end) override {
    return static_cast<float>(*static_cast<int64_t*>(end) - *static_cast<int64_t*>(start)) / 1e6f;
  }

 private:
  std::atomic<uintptr_t> next_{0x100};  // distinct from nullptr (the default stream)
  std::mutex mu_;
  std::unordered_map<NativeEvent, std::unique_ptr<int64_t>> events_;
};

const char* direction(const Device& dst, const Device& src) {
  if (!src.is_cpu()) return dst.is_cpu() ? "d2h" : "d2d";
  return dst.is_cpu() ? "h2h" : "h2d";
}

class NullBackend final : public DeviceBackend {
 public:
  DeviceKind kind() const override { return null_device::kind(); }
  int device_count() const override { return enabled() ? 1 : 0; }
  DeviceInfo device_info(int index) const override {
    check_index(index, "device_info");
    DeviceInfo info;
    info.device_id = index;
    info.device_type = kind();
    info.name = "null device (host memory, in-order streams, the CPU's kernels)";
    return info;
  }
  std::string unavailable_reason() const override {
    return enabled() ? "" : "the null device is a test device and is off; set XRT_NULL_DEVICE=1 to turn it on";
  }
  void set_current(int index) override { check_index(index, "set_current_device"); }
  int current() const override { return 0; }
  void* raw_alloc(int index, std::size_t bytes) override {
    check_index(index, "raw_alloc");
    const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    return std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  }
  void raw_free(int, void* ptr) noexcept override { std::free(ptr); }
  void* host_alloc(std::size_t bytes) override { return raw_alloc(0, bytes); }
  void host_free(void* ptr) noexcept override { std::free(ptr); }
  void copy(void* dst, const Device& dst_dev, const void* src, const Device& src_dev, std::size_t bytes,
            NativeStream) override {
    XRT_CHECK((dst_dev.is_cpu() || dst_dev.kind == kind()) && (src_dev.is_cpu() || src_dev.kind == kind()),
              InvalidArgumentError, "the null backend copies between the host and null devices only (",
              src_dev.str(), " -> ", dst_dev.str(), ")");
    if (bytes) std::memcpy(dst, src, bytes);
    if (Profiler::instance().enabled()) Profiler::instance().record_copy(direction(dst_dev, src_dev), bytes);
  }
  void copy_strided(int, void* dst, std::span<const int64_t> dst_strides, const void* src,
                    std::span<const int64_t> src_strides, std::span<const int64_t> shape, std::size_t elem,
                    NativeStream) override {
    // Element by element over the index space (the null device is for correctness).
    int64_t total = 1;
    for (int64_t d : shape) total *= d;
    std::vector<int64_t> idx(shape.size(), 0);
    for (int64_t n = 0; n < total; ++n) {
      int64_t doff = 0, soff = 0;
      for (std::size_t d = 0; d < shape.size(); ++d) {
        doff += idx[d] * dst_strides[d];
        soff += idx[d] * src_strides[d];
      }
      std::memcpy(static_cast<char*>(dst) + doff * static_cast<int64_t>(elem),
                  static_cast<const char*>(src) + soff * static_cast<int64_t>(elem), elem);
      for (std::size_t d = shape.size(); d-- > 0;) {
        if (++idx[d] < shape[d]) break;
        idx[d] = 0;
      }
    }
  }
  void synchronize_device(int) override {}
  std::string attribute(int, std::string_view) const override { return ""; }  // no capability
  int dlpack_device_type() const override { return kDLExtDev; }
  StreamOps& streams() override { return streams_; }

 private:
  void check_index(int index, const char* what) const {
    XRT_CHECK(enabled(), BackendUnavailableError, "null ", what, ": ", unavailable_reason());
    XRT_CHECK(index == 0, InvalidArgumentError, "null device index must be 0, got ", index);
  }

  NullStreamOps streams_;
};

}  // namespace

DeviceKind kind() {
  static const DeviceKind k = DeviceKind::named("null");
  return k;
}

DeviceBackend& backend() {
  static NullBackend* const b = new NullBackend();  // caching allocators may free at exit
  return *b;
}

}  // namespace xpuruntime::null_device
