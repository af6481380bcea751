// Timing a plan step's candidate kernels while the plan is built
// (KernelPolicy.auto_strategy = best_performance, DESIGN.md §3-§4): each
// candidate kernel and algorithm is prepared for the step as the plan prepares
// it, then run by the Dispatcher's tuning loop on scratch buffers of the node's
// real shapes, on a stream of the plan's execution provider. Internal to
// graph/.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "xpuruntime/dispatcher.h"
#include "xpuruntime/graph/plan.h"

namespace xpuruntime::graph {

class ExecutionProvider;
class RunResources;

// The scratch inputs and outputs of one step in the provider's memory: float
// inputs hold random values in [-1, 1) (a seed fixed per step, so a re-build
// times the same data), integer and bool inputs zeros (valid indices and
// shapes), and inputs that are plan constants their real values. Released with
// the object.
class StepScratch {
 public:
  // Why the step cannot be timed while the plan is built ("" = it can): a value
  // whose shape is known only at run time.
  static std::string untimable(const ExecutionPlan& plan, const PlanStep& st);

  StepScratch(const ExecutionPlan& plan, const PlanStep& st, const ExecutionProvider& provider);
  StepScratch(const StepScratch&) = delete;
  StepScratch& operator=(const StepScratch&) = delete;
  ~StepScratch();

  // One run of `prepared` on the scratch buffers, on the provider's stream,
  // with a workspace of its own (returned to the provider when the run function
  // is dropped).
  CandidateRun runner(PreparedKernelPtr prepared);

 private:
  void* buffer(std::size_t bytes);

  std::shared_ptr<RunResources> res_;
  KernelArgs args_;
};

}  // namespace xpuruntime::graph
