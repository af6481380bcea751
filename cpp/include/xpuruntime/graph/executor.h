// Executor (DESIGN.md §5): runs an ExecutionPlan on the execution provider its
// header names (xpuruntime/provider.h), step by step: each step's prepared kernel with
// device pointers, the run's stream and a workspace; or, for static plans on a
// provider that captures, as one device graph replayed per run. Device-neutral:
// host inputs are borrowed zero-copy where the provider's kernels read host memory
// (the CPU) and copied to the device once at the plan's edge otherwise; device
// inputs (DLPack) are read in place; outputs are written into caller buffers or
// returned as fresh host tensors. Constants are uploaded once per executor. Static intermediates
// live in one arena per run; values shaped only at run time (shapes inferred through
// the op schemas) come from the provider and are freed at their last use.
//
// Thread safety: run() may be called from many threads at once on one Executor.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "xpuruntime/graph/plan.h"
#include "xpuruntime/provider.h"

namespace xpuruntime::ops {
struct OpSchema;
}

namespace xpuruntime::graph {

// A tensor at the plan's edge: host memory, or memory of the plan's device that
// kernels read and write in place (a torch or cupy CUDA tensor through DLPack).
// Contiguous.
struct EdgeTensor {
  DType dtype = DType::kFloat32;
  Shape shape;
  void* data = nullptr;
  bool on_device = false;
};

struct RunRequest {
  std::vector<std::string> input_names;
  std::vector<EdgeTensor> inputs;
  std::vector<std::string> output_names;  // empty: every plan output, in model order
  // Caller buffers, one per requested output (or none): each must have its
  // output's dtype and shape and is written in place; a device buffer is written
  // by the kernel that produces the output (no copy). Outputs without a buffer
  // come back as fresh host tensors.
  std::vector<EdgeTensor> outputs;
  // The caller's stream (device providers): the run is issued on it, after the
  // caller's earlier work. When every input and output is device memory the run
  // returns without waiting for the device; otherwise it returns when outputs are
  // ready. nullptr: a stream of the run's own, and run() returns when done.
  NativeStream stream = nullptr;
  // Replay the whole plan as one device graph, captured on the first such run
  // (plans with static shapes, on providers that capture; otherwise the run goes
  // step by step and graph_status() says why).
  bool use_graph = false;
};

struct RunStats {
  int64_t dynamic_bytes_peak = 0;  // bytes of run-time shaped intermediates alive at once
  int64_t steps_run = 0;           // kernels run (views excluded; 0 for a replayed graph)
  int64_t copies_to_device = 0;    // edge copies host -> device
  int64_t copies_to_host = 0;      // edge copies device -> host
  int64_t copies_on_device = 0;    // edge copies within the device (graph I/O buffers)
  int64_t copy_bytes = 0;          // bytes of host <-> device copies
  int64_t device_copy_bytes = 0;   // bytes of device <-> device copies
  bool graph_captured = false;     // this run captured the plan's graph
  bool graph_replayed = false;     // this run replayed it
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

  // Runs the plan on named host inputs (every plan input exactly once, any order).
  // Returns the requested outputs in the requested order (all plan outputs, in
  // model order, when output_names is empty). Throws InvalidArgumentError for an
  // unknown, missing or duplicated input, a wrong dtype, rank or shape (listing
  // what is expected), or an unknown output name.
  std::vector<HostTensor> run(const std::vector<std::string>& input_names,
                              const std::vector<HostTensor>& inputs,
                              const std::vector<std::string>& output_names = {},
                              RunStats* stats = nullptr) const;
  // The general form: device inputs, caller output buffers, the caller's stream,
  // graph replay (RunRequest). Entries of the result for outputs written into a
  // caller buffer are undefined HostTensors.
  std::vector<HostTensor> run(const RunRequest& request, RunStats* stats = nullptr) const;

  const ExecutionPlan& plan() const { return *plan_; }
  const ExecutionProvider& provider() const { return *provider_; }
  std::shared_ptr<const ExecutionPlan> plan_ptr() const { return plan_; }
  // Human-readable expectation of every input: "input_ids: int64[batch, 128]".
  std::string describe_inputs() const;
  // Why the plan cannot be replayed as a graph here ("" when it can), and whether
  // it has been captured: "captured", "not captured yet", or the reason.
  std::string graph_unavailable_reason() const;
  std::string graph_status() const;
  // Where this executor's set-up went, in milliseconds of wall time: "upload" (the
  // constants to the device), and once a graph run captured the plan, "graph_first_run"
  // (the step-by-step run before capture) and "graph_capture" (capture and instantiate).
  std::map<std::string, double> timings_ms() const;

 private:
  struct Binding;
  struct GraphState;
  Binding bind(const RunRequest& request) const;
  // Runs every step with `data` holding the bound inputs and constants.
  void run_steps(Binding& b, RunResources& res, RunStats& stats) const;
  std::vector<HostTensor> finish(Binding& b, RunResources& res, RunStats& stats) const;
  bool run_graph(Binding& b, NativeStream caller, RunStats& stats, std::vector<HostTensor>& out) const;
  // Per plan input, then per plan output: the caller's device buffer a graph can be
  // captured on, or null (host memory, no buffer given, an output over an input).
  std::vector<void*> graph_signature(const Binding& b) const;

  std::shared_ptr<const ExecutionPlan> plan_;
  ProviderPtr provider_;
  std::shared_ptr<const DeviceConstants> constants_;  // the plan constants on the device
  std::size_t workspace_bytes_ = 0;                   // the largest step's need
  double upload_ms_ = 0;                              // constants_'s upload
  std::vector<const ops::OpSchema*> schemas_;          // per step, for run-time shapes
  std::string graph_unavailable_;                      // fixed at construction
  std::unique_ptr<GraphState> graph_;                  // the captured plan (use_graph)
};

}  // namespace xpuruntime::graph
