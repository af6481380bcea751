// Decisions and the decision log (DESIGN.md §4). Every kernel or engine selection
// records one Decision: what was asked, every candidate with its verdict and reason
// code, what was chosen, and the rule that chose it. Recording is always on.
// Python mirrors these as plain dataclasses (xpuruntime.dispatch.decision).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "xpuruntime/policy.h"
#include "xpuruntime/tensor.h"

namespace xpuruntime {

// Stable rule names (they appear in logs and golden files).
namespace rule {
inline constexpr const char* kPinned = "pinned";
inline constexpr const char* kPolicyRequire = "policy.require";
inline constexpr const char* kPolicyPrefer = "policy.prefer";
inline constexpr const char* kFallback = "fallback";
inline constexpr const char* kAutoFirstSupported = "auto.first_supported";
inline constexpr const char* kAutoBestPerformance = "auto.best_performance";
inline constexpr const char* kNone = "none";  // nothing could run; the call raised
}  // namespace rule

namespace verdict {
inline constexpr const char* kSupported = "supported";
inline constexpr const char* kRejected = "rejected";
}  // namespace verdict

struct Candidate {
  std::string kernel;
  std::string verdict;      // verdict::kSupported | verdict::kRejected
  std::string reason_code;  // reason::* when rejected, "" when supported
  std::string detail;
  std::optional<double> time_ms;  // best time when tuned (milliseconds)
  std::string algorithm;          // the algorithm timed best for this kernel, when tuned
};

struct Decision {
  std::string op;
  std::string node;
  std::string device;               // "cuda:0", "cpu"
  std::vector<std::string> dtypes;  // input dtypes
  std::vector<Shape> shapes;        // input shapes
  std::vector<Candidate> candidates;
  std::string chosen;     // kernel name; "" when nothing could run
  std::string algorithm;  // chosen algorithm id ("" = default)
  std::string rule;       // rule::*
  std::optional<KernelPin> pin;  // the pin used, or the one tuning produced
  std::map<std::string, double> timings;  // "kernel" or "kernel/algorithm" -> ms, when tuned
  std::string detail;
  std::string key;     // OpContext::case_key()
  uint64_t seq = 0;    // position in the log (1-based, increasing)
  // Calls this decision answered. A hot path that caches its choice per case (routed
  // torch calls) records the case once and adds its later calls here.
  uint64_t hits = 1;

  // Compact JSON of all fields (sorted keys).
  std::string to_json() const;
  // One-line summary: "matmul@node0 cuda:0 -> cublasLt (policy.require)".
  std::string summary() const;
};

// A thread-safe ring of the most recent decisions.
class DecisionLog {
 public:
  static constexpr std::size_t kDefaultCapacity = 4096;
  explicit DecisionLog(std::size_t capacity = kDefaultCapacity)
      : capacity_(capacity == 0 ? 1 : capacity) {}

  // Stores a copy, assigns and returns its sequence number.
  uint64_t append(Decision d);
  // Adds `n` calls to the decision numbered `seq`; false when it has left the ring.
  bool add_hits(uint64_t seq, uint64_t n);
  // Oldest first. `last` > 0 returns only the newest `last` decisions.
  std::vector<Decision> snapshot(std::size_t last = 0) const;
  std::size_t size() const;
  std::size_t capacity() const;
  void set_capacity(std::size_t capacity);  // drops the oldest when shrinking; min 1
  void clear();
  uint64_t total_recorded() const;  // including those dropped from the ring

 private:
  mutable std::mutex mu_;
  std::deque<Decision> ring_;
  std::size_t capacity_;
  uint64_t next_seq_ = 1;
};

}  // namespace xpuruntime
