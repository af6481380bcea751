// Streams, events and graphs (seed 001 §2.2 StreamManager). A Stream wraps a
// native stream of one device; the CPU's streams run their work inline, in order.
// Objects are shared_ptr-owned; a Stream/Event may be used from any thread but
// recording into one stream from two threads at once orders nothing.
#pragma once

#include <memory>

#include "xpuruntime/backend.h"
#include "xpuruntime/device.h"

namespace xpuruntime {

class Stream {
 public:
  // Wraps an existing native stream without owning it (e.g. torch's current stream).
  static std::shared_ptr<Stream> wrap(const Device& d, NativeStream s);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  const Device& device() const { return device_; }
  NativeStream native() const { return native_; }
  void synchronize() const;
  bool query() const;  // true when all work has finished
  bool is_default() const { return native_ == nullptr; }

 private:
  friend class StreamManager;
  Stream(const Device& d, NativeStream s, bool owned) : device_(d), native_(s), owned_(owned) {}
  Device device_;
  NativeStream native_ = nullptr;
  bool owned_ = false;
};

class Event {
 public:
  explicit Event(const Device& d, bool enable_timing = true);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& s);
  void synchronize() const;
  bool query() const;
  // Makes `s` wait for this event without blocking the host.
  void wait(const Stream& s) const;
  // Milliseconds from `start` to this event (both recorded, same device).
  float elapsed_ms_since(const Event& start) const;
  const Device& device() const { return device_; }
  NativeEvent native() const { return native_; }

 private:
  Device device_;
  NativeEvent native_ = nullptr;
  bool recorded_ = false;
};

// A captured and instantiated graph (CUDA graphs).
class Graph {
 public:
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void replay(const Stream& s) const;
  const Device& device() const { return device_; }

 private:
  friend class GraphCapture;
  Graph(const Device& d, NativeGraph g) : device_(d), native_(g) {}
  Device device_;
  NativeGraph native_ = nullptr;
};

// Captures the work issued on a (non-default) stream between begin() and end().
class GraphCapture {
 public:
  explicit GraphCapture(std::shared_ptr<Stream> s);
  ~GraphCapture();  // aborts an unfinished capture
  void begin();
  std::shared_ptr<Graph> end();
  bool capturing() const { return capturing_; }

 private:
  std::shared_ptr<Stream> stream_;
  bool capturing_ = false;
};

class StreamManager {
 public:
  static StreamManager& instance();
  // A new stream owned by the returned object. Lower priority numbers run first.
  std::shared_ptr<Stream> create_stream(const Device& d, int priority = 0);
  // The device's default (legacy/null) stream.
  std::shared_ptr<Stream> default_stream(const Device& d);
  // Per-thread current stream of a device (default stream until set).
  std::shared_ptr<Stream> current_stream(const Device& d);
  void set_current_stream(std::shared_ptr<Stream> s);

 private:
  StreamManager() = default;
};

}  // namespace xpuruntime
