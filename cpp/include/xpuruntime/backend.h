// The device-backend interface (DESIGN.md §2): one implementation per device kind
// owns raw memory, copies, streams, events and graph capture. Each comes from the
// plugin serving its device kind (plugin.h): the CPU one is built into the core, the
// others are libraries (libxpuruntime_<kind>.so) loaded at run time, so a machine
// without a vendor's libraries still imports us. The core asks the backend what
// differs between devices (attributes by key, DLPack codes, strided copies), never a
// vendor name.
// Implementations must be thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "xpuruntime/device.h"

namespace xpuruntime {

using NativeStream = void*;  // the vendor's stream handle (cudaStream_t); nullptr on CPU
using NativeEvent = void*;   // the vendor's event (cudaEvent_t); a host timestamp slot on CPU
using NativeGraph = void*;   // the vendor's instantiated graph (cudaGraphExec_t)

// DLPack device codes (dlpack.h DLDeviceType) the core itself needs.
inline constexpr int kDLPackCPU = 1;

// Memory and copies. Raw allocations bypass caching; MemoryManager caches on top.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual DeviceKind kind() const = 0;
  virtual int device_count() const = 0;
  virtual DeviceInfo device_info(int index) const = 0;
  // Empty when usable; else why not (missing library, no driver, no device).
  virtual std::string unavailable_reason() const = 0;
  virtual void set_current(int index) = 0;
  virtual int current() const = 0;
  // Returns nullptr when the device is out of memory; throws on other errors.
  virtual void* raw_alloc(int index, std::size_t bytes) = 0;
  virtual void raw_free(int index, void* ptr) noexcept = 0;
  // Page-locked host memory (CPU backend: aligned host memory).
  virtual void* host_alloc(std::size_t bytes) = 0;
  virtual void host_free(void* ptr) noexcept = 0;
  // Copies bytes between any two devices this backend can see (host included);
  // asynchronous on `stream` when it is not null.
  virtual void copy(void* dst, const Device& dst_dev, const void* src, const Device& src_dev,
                    std::size_t bytes, NativeStream stream) = 0;
  // Copies a strided view to a strided view on device `index` of this backend
  // (elements of elem_size bytes; strides in elements, one per shape dimension);
  // asynchronous on `stream` when it is not null.
  virtual void copy_strided(int index, void* dst, std::span<const int64_t> dst_strides, const void* src,
                            std::span<const int64_t> src_strides, std::span<const int64_t> shape,
                            std::size_t elem_size, NativeStream stream) = 0;
  virtual void synchronize_device(int index) = 0;

  // A device attribute by key, "" when the backend has none by that name. Keys the
  // core asks: "capability" (an integer the kernel table's min/max_capability compare
  // against, e.g. 90), "arch" (what the decision log prints after the kind, e.g.
  // "sm90"), "host_memory" ("pinned" when host_alloc returns page-locked memory).
  virtual std::string attribute(int index, std::string_view key) const = 0;
  // The DLPack device code of this backend's memory (kDLCPU for host memory).
  virtual int dlpack_device_type() const = 0;
  // What another DLPack code means to this backend: kDevice when it is also this
  // backend's device memory (managed memory), kHost when it is host memory this
  // backend made (pinned), kNone otherwise.
  enum class DLPackRole { kNone, kDevice, kHost };
  virtual DLPackRole dlpack_role(int dl_device_type) const {
    return dl_device_type == dlpack_device_type() ? DLPackRole::kDevice : DLPackRole::kNone;
  }

  class StreamOps;
  class GraphOps;
  // Streams and events (every backend has them; the CPU's run work in order, inline).
  virtual StreamOps& streams() = 0;
  // Graph capture is optional: nullptr when the backend cannot capture.
  virtual GraphOps* graphs() { return nullptr; }
};

class DeviceBackend::StreamOps {
 public:
  virtual ~StreamOps() = default;
  virtual NativeStream create_stream(int index, int priority) = 0;
  virtual void destroy_stream(int index, NativeStream s) noexcept = 0;
  virtual void synchronize_stream(int index, NativeStream s) = 0;
  virtual bool query_stream(int index, NativeStream s) = 0;  // true when idle
  virtual NativeEvent create_event(int index, bool enable_timing) = 0;
  virtual void destroy_event(int index, NativeEvent e) noexcept = 0;
  virtual void record_event(int index, NativeEvent e, NativeStream s) = 0;
  virtual void synchronize_event(int index, NativeEvent e) = 0;
  virtual bool query_event(int index, NativeEvent e) = 0;  // true when complete
  virtual void stream_wait_event(int index, NativeStream s, NativeEvent e) = 0;
  virtual float elapsed_ms(int index, NativeEvent start, NativeEvent end) = 0;
};

class DeviceBackend::GraphOps {
 public:
  virtual ~GraphOps() = default;
  virtual void begin_capture(int index, NativeStream s) = 0;
  // Ends capture and instantiates the graph.
  virtual NativeGraph end_capture(int index, NativeStream s) = 0;
  virtual void launch(int index, NativeGraph g, NativeStream s) = 0;
  virtual void destroy(int index, NativeGraph g) noexcept = 0;
  virtual bool is_capturing(int index, NativeStream s) = 0;
};

}  // namespace xpuruntime
