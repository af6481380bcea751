// Binding plan steps to kernels (DESIGN.md §5): the compiler dispatches every
// step through the Dispatcher for the plan's execution provider and prepares
// the chosen kernel once; a loaded plan prepares the kernels it recorded again.
// Internal to graph/.
#pragma once

#include "xpuruntime/graph/plan.h"
#include "xpuruntime/provider.h"
#include "xpuruntime/policy.h"

namespace xpuruntime::graph {

// Dispatches every step of `plan` (steps and values built, memory not yet
// planned) on `provider` under the policies, records each Decision
// (sub-kernels' too) in plan.decisions in step order, and fills each step's
// kernel, algorithm, rule, kernel_ptr and prepared. Throws
// UnsupportedOperationError naming the node when the chosen kernel cannot run
// inside a plan on this provider.
void dispatch_steps(ExecutionPlan& plan, const ExecutionProvider& provider,
                    const KernelPolicy& kernel_policy, const ExecutionPolicy& exec_policy);

// Prepares every step of a deserialized plan again, pinned to its recorded
// kernel, algorithm and sub-decisions (no new dispatch). Throws
// UnsupportedOperationError naming node and kernel when this build lacks the
// kernel or it no longer supports the step, and for a device without an
// execution provider.
void prepare_loaded_steps(ExecutionPlan& plan);

}  // namespace xpuruntime::graph
