// Executor (DESIGN.md §5): runs an ExecutionPlan on the execution provider its
// header names (graph/provider.h), step by step: each step's prepared kernel with
// device pointers, the run's stream and a workspace. Device-neutral: inputs are
// host tensors, borrowed zero-copy where the provider's kernels read host memory
// (the CPU) and copied to the device once at the plan's edge otherwise; outputs are
// fresh host tensors the caller owns (written in place on the CPU, copied out at the
// edge elsewhere). Constants are uploaded once per executor. Static intermediates
// live in one arena per run; values shaped only at run time (shapes inferred through
// the op schemas) come from the provider and are freed at their last use.
//
// Thread safety: run() may be called from many threads at once on one Executor.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "xpuruntime/graph/plan.h"
#include "xpuruntime/graph/provider.h"

namespace xpuruntime::ops {
struct OpSchema;
}

namespace xpuruntime::graph {

struct RunStats {
  int64_t dynamic_bytes_peak = 0;  // bytes of run-time shaped intermediates alive at once
  int64_t steps_run = 0;           // kernels run (views excluded)
  int64_t copies_to_device = 0;    // edge copies (0 where the provider shares host memory)
  int64_t copies_to_host = 0;
  int64_t copy_bytes = 0;
};

class Executor {
 public:
  // Throws UnsupportedOperationError when no execution provider serves the plan's
  // device (naming the registered ones), InvalidArgumentError for a plan whose steps
  // were not prepared.
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
  const ExecutionProvider& provider() const { return *provider_; }
  std::shared_ptr<const ExecutionPlan> plan_ptr() const { return plan_; }
  // Human-readable expectation of every input: "input_ids: int64[batch, 128]".
  std::string describe_inputs() const;

 private:
  std::shared_ptr<const ExecutionPlan> plan_;
  ProviderPtr provider_;
  std::shared_ptr<const DeviceConstants> constants_;  // the plan constants on the device
  std::size_t workspace_bytes_ = 0;                   // the largest step's need
  std::vector<const ops::OpSchema*> schemas_;          // per step, for run-time shapes
};

}  // namespace xpuruntime::graph
