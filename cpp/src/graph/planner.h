// Plan building and memory planning (compiler.cpp calls these last).
#pragma once

#include "xpuruntime/ir.h"
#include "xpuruntime/graph/plan.h"

namespace xpuruntime::graph {

// Fills plan.values/constants/inputs/outputs from the graph, renumbering the value
// ids inside plan.steps (whose nodes still carry graph ids), and marks view steps.
void build_plan_values(const Graph& g, ExecutionPlan& plan);

// Lifetimes -> offsets in one arena (greedy by size: largest first, lowest offset
// that overlaps no live buffer). Static intermediates get arena_offset; values
// shaped at run time stay dynamic. Fills last_use and plan.memory. With
// `step_workspaces`, each prepared step's workspace is a buffer of the arena alive
// during that step only (PlanStep::workspace_offset).
void plan_memory(ExecutionPlan& plan, bool step_workspaces = false);

// Bytes a value occupies in the arena (64-byte aligned), 0 when not static.
int64_t arena_bytes_of(const PlanValue& v);

// The input whose buffer step `s` may write its output 0 into (in place), or -1:
// on the CPU, elementwise ops whose kernels read each element before writing the
// same index (FusedElementwise, unary activations, same-shape binary ops) and
// NhwcConv's fused residual (oneDNN's sum post-op accumulates into the residual).
// The input must have output 0's dtype and static shape. The planner shares the
// buffer only where that input's lifetime ends at step s; the plan verifier accepts
// exactly these overlaps.
int inplace_input(const ExecutionPlan& plan, std::size_t s);

}  // namespace xpuruntime::graph
