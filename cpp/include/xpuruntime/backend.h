// The device-backend interface (DESIGN.md §2): one implementation per device kind
// owns raw memory, copies, streams, events and graph capture. Each comes from the
// plugin serving its device type (plugin.h): the CPU one is built into the core, the
// CUDA one is a library (libxpuruntime_cuda.so) loaded at run time, so a machine
// without CUDA libraries still imports us.
// Implementations must be thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "xpuruntime/device.h"

namespace xpuruntime {

using NativeStream = void*;  // cudaStream_t on CUDA; nullptr on CPU
using NativeEvent = void*;   // cudaEvent_t on CUDA; a host timestamp slot on CPU
using NativeGraph = void*;   // cudaGraphExec_t

// Memory and copies. Raw allocations bypass caching; MemoryManager caches on top.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual DeviceType type() const = 0;
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
  virtual void synchronize_device(int index) = 0;

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
