// What the pattern fusions (fusion_layernorm.cpp, fusion_attention.cpp) share: graph
// queries over single-use chains, scalar constants, and the question every pattern
// asks before it rewrites anything: does a kernel of the plan's device run the fused
// node? The answer, with each candidate kernel's verdict, is recorded as a Decision
// (op "fusion") in the plan's decisions, so explain() names each fusion or says why a
// matched subgraph was left as it was.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/passes.h"
#include "xpuruntime/provider.h"
#include "xpuruntime/kernel_registry.h"

namespace xpuruntime::graph::passes::patterns {

using Consumers = std::vector<std::vector<int>>;

bool is_output(const Graph& g, int v);
// The node producing v, or nullptr (graph inputs, constants, omitted values).
const Node* producer(const Graph& g, int v);
// v is read by exactly one node (once) and is not a graph output.
bool single_use(const Graph& g, const Consumers& cons, int v);
// v is a constant with one element; its value as a double.
std::optional<double> scalar_constant(const Graph& g, int v);
// dtype and static shape of v (a constant's own shape); nullopt when unknown.
std::optional<TensorSpec> spec_of(const Graph& g, int v);
bool is_float(DType t);

// A fused node the pattern wants to create, described before the graph changes.
struct Candidate {
  Node node;                       // op type, attributes, name (inputs/outputs unused)
  std::vector<TensorSpec> inputs;  // an omitted optional input: a default TensorSpec
  std::vector<TensorSpec> outputs;
  std::string pattern;  // what was matched, for the decision's detail
};

// Asks the registry whether a kernel that a plan step can hold (not requested-only,
// not output-allocating) on the provider's device supports the candidate, records a
// Decision (op "fusion", node = the fused node's name, chosen = its op type or ""
// when no kernel takes it, candidates = each kernel's verdict) into `decisions`, and
// returns whether the fusion may go ahead.
bool kernel_runs(const Candidate& c, const ExecutionProvider& provider,
                 std::vector<std::string>& decisions);

// Whether some kernel a plan step can hold on the provider's device supports the
// candidate (nothing recorded: for trying variants of one match).
bool any_kernel_supports(const Candidate& c, const ExecutionProvider& provider);

// A fresh value for a tensor the rewrite creates.
int new_value(Graph& g, const std::string& prefix, DType dtype, const Shape& shape);
// A new 1-D int64 constant (a Reshape's shape, a Slice's bounds).
int int64_constant(Graph& g, const std::string& prefix, const std::vector<int64_t>& vals);
// A new [c] constant of ones in float dtype dt (a required scale the pattern lacked).
int ones_constant(Graph& g, DType dt, int64_t c, const std::string& prefix);
// A node name no other node has (base itself when free).
std::string unique_node_name(const Graph& g, const std::string& base);

}  // namespace xpuruntime::graph::passes::patterns
