// The Dispatcher (DESIGN.md §4): picks one kernel per op call from the registry
// under a KernelPolicy, records a Decision for every selection, and runs it.
//
// Selection (select) is deterministic and cheap: candidates are ordered by policy
// preference, then registry priority, then name; each gets a verdict; the first
// rule that applies chooses:
//   pinned               the policy pins this exact case (kernel + algorithm)
//   policy.require/prefer the first supported kernel the policy names
//   fallback             mode prefer, none of the named kernels supports the case
//   auto.first_supported no entry / "auto": highest-priority supported kernel
//   auto.best_performance no entry / "auto" under best_performance: the tuned winner
// mode require with no supported named kernel raises UnsupportedOperationError
// naming op, kernel and reason. dispatch() = select + run; under best_performance
// it times every supported candidate (and each of its algorithms) once per case key,
// caches the winner, and export_pins() writes those winners as pins. A native plan
// compiled under best_performance tunes its steps the same way, through
// SelectOptions::prepare_candidate (prepared kernels on scratch buffers). Times within
// the measurement noise (at least 1% of the fastest) are a tie that the earlier
// candidate wins; the decision's detail records the regime, the winner's margin or
// the tie (caller-measured times: SelectOptions::timings_ms, noise_ms, regime).
//
// Thread safety: every method may be called from any thread. The global policy is
// replaced atomically; a ScopedPolicy overrides it for the calling thread only.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "xpuruntime/decision.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/policy.h"

namespace xpuruntime {

// One candidate (kernel + algorithm) of a case, ready to run once on `stream`, for tuning.
struct CandidateRun {
  std::function<void()> run;
  NativeStream stream = nullptr;
};

// What a caller that runs the chosen kernel itself (PyTorch routing) adds to a
// selection. The rules stay the Dispatcher's; these only say what the caller can run
// and what it measured.
struct SelectOptions {
  // Kernels the caller can run. Registered kernels not listed are no candidates (a
  // routed torch call runs torch's kernels and ours with a torch bridge, never the
  // native engine's CPU kernels); a listed name that is not registered is rejected
  // backend_unavailable. Empty = every registered kernel of the op.
  std::vector<std::string> runnable;
  // The kernel the fallback rule takes when it is supported ("torch" for routed torch
  // calls: falling back means torch's own kernel). "" = the highest-priority one.
  std::string fallback_kernel;
  // best_performance timed by the caller (a torch call is timed forward and backward on
  // torch's stream): kernel -> median ms, and kernel -> what it raised when timed.
  // Used when `timed`; otherwise a non-empty untimed_reason says why this case stays
  // auto.first_supported.
  bool timed = false;
  std::map<std::string, double> timings_ms;
  // kernel -> the measurement's noise (ms, e.g. half the spread of its repeats). Two
  // times closer than their noise (or 1% of the faster) are a tie, which the earlier
  // candidate in the Dispatcher's order wins, so noise never flips a choice.
  std::map<std::string, double> noise_ms;
  std::string regime;  // what the times measured ("eager", "captured"), in the detail
  std::map<std::string, std::string> failures;
  std::string untimed_reason;
  // best_performance timed by the Dispatcher on runs the caller prepares (a native
  // plan's step: each candidate kernel and algorithm prepared on scratch inputs of the
  // node's shapes). For a candidate it returns a function that runs it once, and the
  // stream it runs on, or throws when the candidate cannot be prepared there (the
  // decision records that failure). What the function holds is released once the
  // candidate is timed. Results are cached per case and regime like dispatch()'s.
  std::function<CandidateRun(const Kernel& kernel, const std::string& algorithm)> prepare_candidate;
  std::string note;    // the caller's note, first in the decision's detail (a precision hint)
  bool record = true;  // false: evaluate only (the caller looks at the pool, then times it)
};

struct TuningOptions {
  int warmup = 1;      // untimed runs per candidate/algorithm
  int iterations = 5;  // timed runs; the median counts
};

class Dispatcher {
 public:
  // The process-wide dispatcher over KernelRegistry::instance().
  static Dispatcher& instance();
  // A dispatcher over another registry (tests, golden files). `registry` must outlive it.
  explicit Dispatcher(KernelRegistry& registry,
                      std::size_t log_capacity = DecisionLog::kDefaultCapacity);
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // Global policy. set_policy validates against the registry (PolicyError).
  void set_policy(const KernelPolicy& policy);
  KernelPolicy get_policy() const;
  // The policy select(ctx) uses on this thread: the innermost ScopedPolicy, else global.
  KernelPolicy effective_policy() const;

  // Overrides the global policy for the calling thread while alive (sessions, tests).
  class ScopedPolicy {
   public:
    ScopedPolicy(Dispatcher& d, KernelPolicy policy);
    ~ScopedPolicy();
    ScopedPolicy(const ScopedPolicy&) = delete;
    ScopedPolicy& operator=(const ScopedPolicy&) = delete;

   private:
    Dispatcher& dispatcher_;
  };

  // Chooses a kernel and records the Decision (returned). Throws
  // UnsupportedOperationError (after recording) when nothing may run the case.
  Decision select(const OpContext& ctx);
  Decision select(const OpContext& ctx, const KernelPolicy& policy);
  Decision select(const OpContext& ctx, const KernelPolicy& policy, const SelectOptions& options);
  // select + run (+ tuning under best_performance). Fills launch.ctx, algorithm and
  // workspace (allocated on ctx.device when the kernel needs one and none is given).
  Decision dispatch(const OpContext& ctx, KernelLaunch& launch);
  Decision dispatch(const OpContext& ctx, KernelLaunch& launch, const KernelPolicy& policy);

  DecisionLog& log() { return log_; }
  const DecisionLog& log() const { return log_; }
  KernelRegistry& registry() { return registry_; }

  // The tuned winners as pins, added to a copy of `base` (default: the global policy).
  KernelPolicy export_pins() const;
  KernelPolicy export_pins(const KernelPolicy& base) const;
  void clear_tuning_cache();
  std::size_t tuning_cache_size() const;
  void set_tuning_options(const TuningOptions& options);
  TuningOptions tuning_options() const;

 private:
  struct Tuned {
    KernelPin pin;
    std::string verdict;  // how the measured winner won (margin or tie), for the detail
    std::map<std::string, double> timings;
    std::map<std::string, std::pair<double, std::string>> best_per_kernel;  // ms, algorithm
    std::map<std::string, std::string> failures;  // kernel -> what it raised while timed
    uint64_t generation = 0;
  };
  struct Selection;
  std::shared_ptr<const KernelPolicy> current_policy() const;
  Selection evaluate(const OpContext& ctx, const KernelPolicy& policy,
                     const SelectOptions* options) const;
  // Applies the cached, caller-measured or (launch given) fresh tuning result, records
  // and returns the Decision; throws UnsupportedOperationError after recording when
  // nothing may run.
  Decision decide(const OpContext& ctx, const KernelPolicy& policy, KernelLaunch* launch,
                  KernelPtr* chosen, const SelectOptions* options = nullptr);
  Tuned measured(const Selection& sel, const SelectOptions& options) const;
  // Builds one candidate (kernel, algorithm), released after it is timed.
  using MakeCandidate = std::function<CandidateRun(const Kernel&, const std::string&)>;
  // Times every algorithm of every supported candidate of `sel` and ranks them (the one
  // tuning loop: dispatch()'s launches and a plan's prepared steps). time_single: time
  // a case with one candidate too (dispatch() reports its time; a plan skips it).
  Tuned tune(const OpContext& ctx, const Selection& sel, const MakeCandidate& make,
             const std::string& regime, bool time_single) const;
  std::optional<Tuned> cached(const std::string& tuning_key) const;

  KernelRegistry& registry_;
  DecisionLog log_;
  mutable std::shared_mutex policy_mu_;
  std::shared_ptr<const KernelPolicy> policy_;  // replaced whole, so readers never copy maps
  mutable std::mutex tune_mu_;      // guards the caches below
  // One tuning run at a time (equal cases get one winner); recursive, since a plan
  // step's candidate may tune its sub-kernels (a conv's GEMM) while it is prepared.
  mutable std::recursive_mutex tuning_run_mu_;
  std::map<std::string, Tuned> tuned_;  // tuning key -> winner
  std::map<std::string, std::string> tuned_case_;  // case key -> tuning key of its last winner
  TuningOptions tuning_;
};

}  // namespace xpuruntime
