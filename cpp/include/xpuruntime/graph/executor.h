// Executor (DESIGN.md §5): runs an ExecutionPlan. Inputs are borrowed (zero-copy,
// contiguous host memory); outputs are fresh host tensors the caller owns (the
// binding hands them to numpy without a copy). Static intermediates live in one
// arena per concurrent run (arenas are pooled); values shaped only at run time are
// allocated from the caching allocator and freed at their last use.
//
// Thread safety: run() may be called from many threads at once on one Executor.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "xpuruntime/graph/plan.h"

namespace xpuruntime::graph {

struct RunStats {
  int64_t dynamic_bytes_peak = 0;  // bytes of run-time shaped intermediates alive at once
};

class Executor {
 public:
  explicit Executor(std::shared_ptr<const ExecutionPlan> plan);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs the plan on named inputs (every plan input exactly once, any order).
  // Returns the requested outputs in the requested order (all plan outputs, in
  // model order, when output_names is empty). Throws InvalidArgumentError for an
  // unknown, missing or duplicated input, a wrong dtype, rank or shape (listing
  // what is expected), or an unknown output name.
  std::vector<HostTensor> run(const std::vector<std::string>& input_names,
                              const std::vector<HostTensor>& inputs,
                              const std::vector<std::string>& output_names = {},
                              RunStats* stats = nullptr) const;

  const ExecutionPlan& plan() const { return *plan_; }
  std::shared_ptr<const ExecutionPlan> plan_ptr() const { return plan_; }
  // Human-readable expectation of every input: "input_ids: int64[batch, 128]".
  std::string describe_inputs() const;

 private:
  void* acquire_arena() const;
  void release_arena(void* p) const;

  std::shared_ptr<const ExecutionPlan> plan_;
  std::vector<const void*> defs_;  // per step: the OpDef that runs it
  mutable std::mutex arena_mu_;
  mutable std::vector<void*> free_arenas_;
};

}  // namespace xpuruntime::graph
