#include "xpuruntime/profiler.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "core/no_destructor.h"
#include "xpuruntime/error.h"

namespace xpuruntime {
namespace {

struct OpenRange {
  std::string name;
  int64_t start_ns;
};

struct ProfilerState {
  std::mutex mu;
  std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now();
  std::vector<TraceEvent> events;
  ProfilerCounters counters;
  std::function<void(const char*)> nvtx_push;
  std::function<void()> nvtx_pop;
};

ProfilerState& state() {
  static NoDestructor<ProfilerState> s;
  return s.get();
}

uint64_t thread_id() {
  static thread_local uint64_t id = std::hash<std::thread::id>{}(std::this_thread::get_id()) % 100000;
  return id;
}

// Ranges nest per thread.
thread_local std::vector<OpenRange> t_open;

}  // namespace

Profiler::Profiler() = default;

Profiler& Profiler::instance() {
  static NoDestructor<Profiler> p;
  return p.get();
}

int64_t Profiler::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              state().origin)
      .count();
}

void Profiler::enable() {
  auto& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.events.clear();
    s.counters = {};
    s.origin = std::chrono::steady_clock::now();
  }
  t_open.clear();
  enabled_.store(true, std::memory_order_relaxed);
}

void Profiler::disable() { enabled_.store(false, std::memory_order_relaxed); }

void Profiler::set_nvtx_hooks(std::function<void(const char*)> push, std::function<void()> pop) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.nvtx_push = std::move(push);
  s.nvtx_pop = std::move(pop);
}

void Profiler::push_range(const std::string& name) {
  if (!enabled()) return;
  t_open.push_back({name, now_ns()});
  auto& s = state();
  if (s.nvtx_push) s.nvtx_push(name.c_str());
}

void Profiler::pop_range() {
  if (t_open.empty()) return;  // enable() between push and pop, or unbalanced pop
  OpenRange r = std::move(t_open.back());
  t_open.pop_back();
  auto& s = state();
  if (s.nvtx_pop) s.nvtx_pop();
  if (!enabled()) return;
  TraceEvent e{r.name, "range", 'X', r.start_ns, now_ns() - r.start_ns, thread_id(), {}};
  std::lock_guard<std::mutex> lock(s.mu);
  s.events.push_back(std::move(e));
}

void Profiler::add_complete(const std::string& name, const std::string& category, int64_t start_ns,
                            int64_t dur_ns, std::map<std::string, std::string> args) {
  if (!enabled()) return;
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.events.push_back({name, category, 'X', start_ns, dur_ns, thread_id(), std::move(args)});
}

void Profiler::instant(const std::string& name, const std::string& category,
                       std::map<std::string, std::string> args) {
  if (!enabled()) return;
  auto& s = state();
  TraceEvent e{name, category, 'i', now_ns(), 0, thread_id(), std::move(args)};
  std::lock_guard<std::mutex> lock(s.mu);
  s.events.push_back(std::move(e));
}

void Profiler::record_copy(const char* direction, uint64_t bytes) {
  if (!enabled()) return;
  auto& s = state();
  std::string dir = direction;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto& c = s.counters;
    if (dir == "h2d") { ++c.copies_h2d; c.bytes_h2d += bytes; }
    else if (dir == "d2h") { ++c.copies_d2h; c.bytes_d2h += bytes; }
    else if (dir == "d2d") { ++c.copies_d2d; c.bytes_d2d += bytes; }
    else { ++c.copies_h2h; c.bytes_h2h += bytes; }
  }
  instant("copy " + dir, "copy", {{"direction", dir}, {"bytes", std::to_string(bytes)}});
}

void Profiler::record_sync(const char* what) {
  if (!enabled()) return;
  auto& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.counters.syncs;
  }
  instant(std::string("sync ") + what, "sync");
}

void Profiler::record_alloc(uint64_t bytes, bool cache_hit) {
  if (!enabled()) return;
  auto& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.counters.allocs;
    s.counters.alloc_bytes += bytes;
  }
  instant("alloc", "alloc", {{"bytes", std::to_string(bytes)}, {"cache_hit", cache_hit ? "true" : "false"}});
}

void Profiler::record_free(uint64_t bytes) {
  if (!enabled()) return;
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.counters.frees;
}

ProfilerCounters Profiler::counters() const {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.counters;
}

std::vector<TraceEvent> Profiler::events() const {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.events;
}

std::string Profiler::chrome_trace_json() const {
  using nlohmann::json;
  auto evs = events();
  auto c = counters();
  const int pid = static_cast<int>(getpid());
  json trace = json::array();
  trace.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", "xpuruntime"}}}});
  int64_t last_ts = 0;
  for (const auto& e : evs) {
    json j = {{"name", e.name}, {"cat", e.category}, {"ph", std::string(1, e.phase)},
              {"ts", static_cast<double>(e.ts_ns) / 1000.0}, {"pid", pid}, {"tid", e.tid}};
    if (e.phase == 'X') j["dur"] = static_cast<double>(e.dur_ns) / 1000.0;
    if (e.phase == 'i') j["s"] = "t";
    if (!e.args.empty()) j["args"] = e.args;
    trace.push_back(std::move(j));
    last_ts = std::max(last_ts, e.ts_ns + e.dur_ns);
  }
  json counter_args = {{"copies_h2d", c.copies_h2d}, {"copies_d2h", c.copies_d2h},
                       {"copies_d2d", c.copies_d2d}, {"copies_h2h", c.copies_h2h},
                       {"bytes_h2d", c.bytes_h2d},   {"bytes_d2h", c.bytes_d2h},
                       {"bytes_d2d", c.bytes_d2d},   {"bytes_h2h", c.bytes_h2h},
                       {"syncs", c.syncs},           {"allocs", c.allocs},
                       {"frees", c.frees},           {"alloc_bytes", c.alloc_bytes}};
  trace.push_back({{"name", "xpuruntime counters"}, {"ph", "C"}, {"pid", pid}, {"tid", 0},
                   {"ts", static_cast<double>(last_ts) / 1000.0}, {"args", counter_args}});
  json doc = {{"traceEvents", trace}, {"displayTimeUnit", "ms"},
              {"otherData", {{"producer", "xpuruntime"}, {"counters", counter_args}}}};
  return doc.dump();
}

void Profiler::export_chrome_trace(const std::string& path) const {
  std::ofstream f(path);
  XRT_CHECK(f.good(), InvalidArgumentError, "cannot open '", path, "' for writing the trace");
  f << chrome_trace_json();
  XRT_CHECK(f.good(), InvalidArgumentError, "writing the trace to '", path, "' failed");
}

std::string Profiler::summary() const {
  struct Agg {
    uint64_t count = 0;
    int64_t total_ns = 0;
  };
  std::map<std::string, Agg> by_name;
  for (const auto& e : events())
    if (e.phase == 'X') {
      auto& a = by_name[e.name];
      ++a.count;
      a.total_ns += e.dur_ns;
    }
  std::vector<std::pair<std::string, Agg>> rows(by_name.begin(), by_name.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.total_ns > b.second.total_ns; });
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof(line), "%-40s %8s %12s %12s\n", "range", "count", "total ms", "mean us");
  os << line;
  for (const auto& [name, a] : rows) {
    std::snprintf(line, sizeof(line), "%-40.40s %8llu %12.3f %12.2f\n", name.c_str(),
                  static_cast<unsigned long long>(a.count), a.total_ns / 1e6,
                  a.total_ns / 1e3 / static_cast<double>(a.count));
    os << line;
  }
  auto c = counters();
  os << "copies: h2d " << c.copies_h2d << " (" << c.bytes_h2d << " B), d2h " << c.copies_d2h << " ("
     << c.bytes_d2h << " B), d2d " << c.copies_d2d << " (" << c.bytes_d2d << " B), h2h "
     << c.copies_h2h << " (" << c.bytes_h2h << " B); syncs " << c.syncs << "; allocs " << c.allocs
     << " (" << c.alloc_bytes << " B), frees " << c.frees << "\n";
  return os.str();
}

}  // namespace xpuruntime
