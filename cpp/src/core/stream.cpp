#include "xpuruntime/stream.h"

#include <map>
#include <mutex>

#include "xpuruntime/error.h"
#include "xpuruntime/profiler.h"

namespace xpuruntime {
namespace {
DeviceBackend& backend_of(const Device& d) {
  DeviceManager::instance().check_device(d);
  return DeviceManager::instance().backend(d.kind);
}
// Per-thread current stream per device.
thread_local std::map<std::pair<int, int>, std::shared_ptr<Stream>> t_current;
std::pair<int, int> key_of(const Device& d) { return {static_cast<int>(d.kind.id()), d.index}; }
}  // namespace

std::shared_ptr<Stream> Stream::wrap(const Device& d, NativeStream s) {
  return std::shared_ptr<Stream>(new Stream(d, s, /*owned=*/false));
}

Stream::~Stream() {
  if (owned_ && native_) {
    if (DeviceBackend* b = DeviceManager::instance().backend_or_null(device_.kind))
      b->streams().destroy_stream(device_.index, native_);
  }
}

void Stream::synchronize() const {
  backend_of(device_).streams().synchronize_stream(device_.index, native_);
  if (Profiler::instance().enabled()) Profiler::instance().record_sync("stream");
}

bool Stream::query() const { return backend_of(device_).streams().query_stream(device_.index, native_); }

Event::Event(const Device& d, bool enable_timing) : device_(d) {
  native_ = backend_of(d).streams().create_event(d.index, enable_timing);
}

Event::~Event() {
  if (native_) {
    if (DeviceBackend* b = DeviceManager::instance().backend_or_null(device_.kind))
      b->streams().destroy_event(device_.index, native_);
  }
}

void Event::record(const Stream& s) {
  XRT_CHECK(s.device() == device_, InvalidArgumentError, "event of ", device_.str(),
            " recorded on a stream of ", s.device().str());
  backend_of(device_).streams().record_event(device_.index, native_, s.native());
  recorded_ = true;
}

void Event::synchronize() const {
  backend_of(device_).streams().synchronize_event(device_.index, native_);
  if (Profiler::instance().enabled()) Profiler::instance().record_sync("event");
}

bool Event::query() const { return backend_of(device_).streams().query_event(device_.index, native_); }

void Event::wait(const Stream& s) const {
  backend_of(device_).streams().stream_wait_event(device_.index, s.native(), native_);
}

float Event::elapsed_ms_since(const Event& start) const {
  XRT_CHECK(recorded_ && start.recorded_, InvalidArgumentError,
            "elapsed time needs both events recorded first (call record(stream))");
  XRT_CHECK(start.device_ == device_, InvalidArgumentError, "events on different devices (",
            start.device_.str(), ", ", device_.str(), ")");
  return backend_of(device_).streams().elapsed_ms(device_.index, start.native_, native_);
}

Graph::~Graph() {
  if (native_) {
    if (DeviceBackend* b = DeviceManager::instance().backend_or_null(device_.kind))
      if (auto* g = b->graphs()) g->destroy(device_.index, native_);
  }
}

void Graph::replay(const Stream& s) const {
  auto* g = backend_of(device_).graphs();
  XRT_CHECK(g != nullptr, UnsupportedOperationError, "graph replay is not supported on ", device_.str());
  g->launch(device_.index, native_, s.native());
}

GraphCapture::GraphCapture(std::shared_ptr<Stream> s) : stream_(std::move(s)) {
  XRT_CHECK(stream_ != nullptr, InvalidArgumentError, "graph capture needs a stream");
  XRT_CHECK(backend_of(stream_->device()).graphs() != nullptr, UnsupportedOperationError,
            "graph capture is not supported on ", stream_->device().str(),
            " (CUDA graphs need a CUDA device)");
  XRT_CHECK(!stream_->is_default(), InvalidArgumentError,
            "graph capture needs a non-default stream: create one with create_stream()");
}

GraphCapture::~GraphCapture() {
  if (capturing_) {
    try {
      end();  // discard the unfinished graph
    } catch (...) {
    }
  }
}

void GraphCapture::begin() {
  XRT_CHECK(!capturing_, InvalidArgumentError, "graph capture already begun");
  backend_of(stream_->device()).graphs()->begin_capture(stream_->device().index, stream_->native());
  capturing_ = true;
}

std::shared_ptr<Graph> GraphCapture::end() {
  XRT_CHECK(capturing_, InvalidArgumentError, "graph capture end() without begin()");
  capturing_ = false;
  const Device& d = stream_->device();
  NativeGraph g = backend_of(d).graphs()->end_capture(d.index, stream_->native());
  return std::shared_ptr<Graph>(new Graph(d, g));
}

StreamManager& StreamManager::instance() {
  static StreamManager m;  // stateless apart from thread-locals
  return m;
}

std::shared_ptr<Stream> StreamManager::create_stream(const Device& d, int priority) {
  NativeStream s = backend_of(d).streams().create_stream(d.index, priority);
  return std::shared_ptr<Stream>(new Stream(d, s, /*owned=*/true));
}

std::shared_ptr<Stream> StreamManager::default_stream(const Device& d) {
  DeviceManager::instance().check_device(d);
  return std::shared_ptr<Stream>(new Stream(d, nullptr, /*owned=*/false));
}

std::shared_ptr<Stream> StreamManager::current_stream(const Device& d) {
  auto it = t_current.find(key_of(d));
  if (it != t_current.end()) return it->second;
  return default_stream(d);
}

void StreamManager::set_current_stream(std::shared_ptr<Stream> s) {
  XRT_CHECK(s != nullptr, InvalidArgumentError, "set_current_stream(None)");
  t_current[key_of(s->device())] = std::move(s);
}

}  // namespace xpuruntime
