// Profiler (DESIGN.md §10): off by default and near free when off (one relaxed
// atomic load per hook). When on it records ranges (host time; NVTX ranges on
// CUDA through the CUDA plugin), instant events and counters for copies,
// synchronizations and allocations, and exports Chrome/Perfetto trace JSON.
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace xpuruntime {

template <typename T>
class NoDestructor;

struct TraceEvent {
  std::string name;
  std::string category;  // "range", "copy", "sync", "alloc", "kernel", "decision", ...
  char phase = 'X';      // 'X' complete, 'i' instant, 'C' counter
  int64_t ts_ns = 0;     // since profiler start
  int64_t dur_ns = 0;
  uint64_t tid = 0;
  std::map<std::string, std::string> args;
};

struct ProfilerCounters {
  uint64_t copies_h2d = 0, copies_d2h = 0, copies_d2d = 0, copies_h2h = 0;
  uint64_t bytes_h2d = 0, bytes_d2h = 0, bytes_d2d = 0, bytes_h2h = 0;
  uint64_t syncs = 0;
  uint64_t allocs = 0, frees = 0;
  uint64_t alloc_bytes = 0;
};

class Profiler {
 public:
  static Profiler& instance();
  void enable();   // clears previous records
  void disable();
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  void push_range(const std::string& name);
  void pop_range();
  // A range that already happened (e.g. device time measured by events).
  void add_complete(const std::string& name, const std::string& category, int64_t start_ns,
                    int64_t dur_ns, std::map<std::string, std::string> args = {});
  void instant(const std::string& name, const std::string& category,
               std::map<std::string, std::string> args = {});
  // Copy direction: "h2d" | "d2h" | "d2d" | "h2h".
  void record_copy(const char* direction, uint64_t bytes);
  void record_sync(const char* what);
  void record_alloc(uint64_t bytes, bool cache_hit);
  void record_free(uint64_t bytes);

  ProfilerCounters counters() const;
  std::vector<TraceEvent> events() const;
  std::string chrome_trace_json() const;
  void export_chrome_trace(const std::string& path) const;
  // A text table: per range name count, total and mean host time; counters.
  std::string summary() const;
  int64_t now_ns() const;  // since profiler start

  // Hooks the CUDA plugin installs to emit NVTX ranges.
  void set_nvtx_hooks(std::function<void(const char*)> push, std::function<void()> pop);

 private:
  template <typename>
  friend class NoDestructor;  // process-lifetime singleton
  Profiler();
  std::atomic<bool> enabled_{false};
};

// RAII range: `ProfileRange r("name");` Costs one atomic load when disabled.
class ProfileRange {
 public:
  explicit ProfileRange(const char* name) {
    if (Profiler::instance().enabled()) {
      active_ = true;
      Profiler::instance().push_range(name);
    }
  }
  explicit ProfileRange(const std::string& name) : ProfileRange(name.c_str()) {}
  ~ProfileRange() {
    if (active_) Profiler::instance().pop_range();
  }
  ProfileRange(const ProfileRange&) = delete;
  ProfileRange& operator=(const ProfileRange&) = delete;

 private:
  bool active_ = false;
};

}  // namespace xpuruntime
