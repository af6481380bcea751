// The native engine's compiler (DESIGN.md §5): Graph -> ExecutionPlan.
// Passes, in order: validation (unknown ops, cycles, missing values), shape and
// dtype inference with constant folding (Shape of a known shape folds too),
// BatchNormalization folding into Conv/Gemm, epilogue fusion (bias, residual and
// activation into Conv/MatMul/Gemm), elementwise-chain fusion (each fusion only where
// the execution provider says it pays), dead-code elimination, dispatch of every
// node through the Dispatcher for the provider's device with the chosen kernel
// prepared once per step (each Decision, sub-kernels' included, recorded in the
// plan), and memory planning (lifetimes -> offsets in one arena).
// compile() is thread-safe (it touches only its arguments and the process-wide
// dispatcher, which is thread-safe).
#pragma once

#include <map>
#include <string>

#include "xpuruntime/ir.h"
#include "xpuruntime/graph/plan.h"
#include "xpuruntime/policy.h"

namespace xpuruntime::graph {

struct CompileOptions {
  // The execution provider (xpuruntime/provider.h) the plan is compiled for, by device kind.
  std::string device = "cpu";
  KernelPolicy kernel_policy;
  ExecutionPolicy exec_policy;
  std::string model_hash;
  // Concrete shapes for inputs with symbolic dims (a specialization); inputs not
  // listed keep their declared shape, and values depending on unknown dims are
  // shaped at run time.
  std::map<std::string, Shape> input_shapes;
  bool fold_constants = true;
  bool fold_batchnorm = true;
  bool fuse = true;
  // Offline preview: compile for `target` (CUDA: "sm_90"; "" = the device of this
  // machine) through every pass, fusion and dispatch decision, without preparing a
  // kernel or touching a device, so it runs on a machine without that device. The
  // plan's header says preview; it shows what would run and is never run or saved.
  bool dry_run = false;
  std::string target;
};

// SHA-256 over both policies' canonical JSON: what a plan is bound to.
std::string policy_fingerprint(const KernelPolicy& kp, const ExecutionPolicy& ep);

// Throws UnsupportedOperationError listing, at once, every op of the graph the native
// engine cannot run on `device` (no schema, another domain, or no kernel there; nodes
// computed only from constants fold and need none), with node counts and names. The
// check compile() starts with, for callers that compile later (dynamic shapes).
void check_supported(const Graph& graph, const std::string& device);

// What the native engine answers for one node on one device (the orchestrator's
// capability, DESIGN.md §6). The per-op registry check check_supported() makes, node
// by node: no kernel preparation and no device needed (the CUDA plugin registers its
// kernels on a machine without a GPU), so it previews a build for another device.
struct NodeSupport {
  std::string node;
  std::string op_type;
  std::string domain;
  std::string op_key;        // the schema's canonical op key ("" without a schema)
  bool supported = false;
  bool folds = false;        // computed only from constants: folded at compile time, no kernel needed
  std::string reason_code;   // "" when supported; reason::kOpUnsupported or reason::kNoKernel
  std::string detail;        // why not, or how it runs
  std::vector<std::string> kernels;  // kernels a plan step can hold for the op on the device
};

// One NodeSupport per node, in topological order. Throws like check_supported() for a
// device without an execution provider or a malformed graph.
std::vector<NodeSupport> node_support(const Graph& graph, const std::string& device);

// Compiles a graph (consumed). With options.dry_run the result is a preview plan
// (PlanHeader.preview): steps, kernels and decisions only. Throws UnsupportedOperationError for a device without
// an execution provider (naming the registered ones) and naming node and op for ops
// without a kernel on that device; InvalidModelError for malformed graphs.
ExecutionPlan compile(Graph graph, const CompileOptions& options);

}  // namespace xpuruntime::graph
