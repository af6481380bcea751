// compile(): runs the passes, dispatches every node, plans memory, builds the plan.
#include "xpuruntime/graph/compiler.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <sstream>

#include "graph/passes.h"
#include "graph/planner.h"
#include "graph/prepare.h"
#include "xpuruntime/error.h"
#include "xpuruntime/graph/provider.h"
#include "xpuruntime/ops/op_schema.h"

namespace xpuruntime::graph {
namespace {

// Whether the provider's device has a kernel for an op key.
// Whether a kernel a plan step can hold exists for the op on the provider's device
// (torch-side kernels a caller must request by name, and kernels that allocate their
// own outputs, cannot run inside a plan).
bool has_kernel(const std::string& key, const ExecutionProvider& provider) {
  for (const KernelDef& d : KernelRegistry::instance().list(key, provider.kernel_device()))
    if (!d.requested_only && !d.allocates_outputs) return true;
  return false;
}

// Every node's op has a schema (checked before the passes, which need the schemas).
void check_known(const Graph& g) {
  for (const Node& n : g.nodes) {
    if (!n.domain.empty() && n.domain != "ai.onnx" && n.domain != "xrt") {
      XRT_THROW(UnsupportedOperationError, n.where(), ": op domain '", n.domain,
                "' is not supported by the native engine (only the default ONNX domain)");
    }
    XRT_CHECK(ops::find_schema(n.op_type) != nullptr, UnsupportedOperationError, n.where(),
              ": op '", n.op_type, "' is not supported by the native engine. Supported ops: ",
              [] {
                std::string all;
                for (const std::string& t : ops::schema_op_types())
                  if (ops::find_schema(t)->domain.empty()) all += t + " ";
                return all;
              }(),
              "- use engine='onnxruntime' for this model, or see docs/ops.md");
  }
}

// Every node has a kernel on the provider's device, except (with skip_constant) the
// nodes that compute only from constants: a Constant, or a shape computation, folds at
// compile time on the CPU kernels and needs no device kernel. Checked before the passes
// (so a model the device cannot run fails before any shape is looked at) and again,
// for every node left, after folding and dead-code elimination.
void check_kernels(const Graph& g, const ExecutionProvider& provider, bool skip_constant) {
  std::vector<char> constant(g.values.size(), 0);
  for (std::size_t v = 0; v < g.values.size(); ++v) constant[v] = g.values[v].constant.defined();
  for (int k : g.topo_order()) {
    const Node& n = g.nodes[k];
    const ops::OpSchema* schema = ops::find_schema(n.op_type);
    if (skip_constant && schema->foldable &&
        std::all_of(n.inputs.begin(), n.inputs.end(), [&](int i) { return i < 0 || constant[i]; })) {
      for (int o : n.outputs)
        if (o >= 0) constant[o] = 1;
      continue;
    }
    if (has_kernel(schema->key, provider)) continue;
    std::ostringstream os;
    for (const std::string& t : ops::schema_op_types()) {
      const ops::OpSchema* s = ops::find_schema(t);
      if (s->domain.empty() && has_kernel(s->key, provider)) os << t << " ";
    }
    XRT_THROW(UnsupportedOperationError, n.where(), ": op '", n.op_type,
              "' has no kernel on device '", provider.name(),
              "' in the native engine. Ops it runs there: ", os.str(),
              "- use engine='onnxruntime' for this model, or see docs/ops.md");
  }
}

}  // namespace

std::string policy_fingerprint(const KernelPolicy& kp, const ExecutionPolicy& ep) {
  return sha256_hex(kp.canonical_json() + "\n" + ep.canonical_json());
}

ExecutionPlan compile(Graph g, const CompileOptions& opt) {
  const ProviderPtr provider = ProviderRegistry::instance().get(opt.device);
  auto t0 = std::chrono::steady_clock::now();
  ExecutionPlan plan;
  plan.header.device = provider->name();
  plan.header.model_hash = opt.model_hash;
  plan.header.policy_fingerprint = policy_fingerprint(opt.kernel_policy, opt.exec_policy);
  plan.header.producer = "xpuruntime 0.1.0";
  plan.header.workspace_limit_bytes = opt.exec_policy.workspace_limit_bytes;
  plan.header.allow_tf32 = opt.exec_policy.allow_tf32;
  plan.header.deterministic = opt.exec_policy.deterministic;
  // Where the kernels are chosen (GPU architecture, library versions): a loader
  // refuses the plan elsewhere.
  plan.header.environment = provider->environment();

  g.validate();
  check_known(g);
  check_kernels(g, *provider, /*skip_constant=*/true);
  // Input shapes: declared dims, or the caller's specialization.
  for (int i : g.inputs) {
    Value& v = g.values[i];
    auto it = opt.input_shapes.find(v.name);
    if (it != opt.input_shapes.end()) {
      if (v.declared) {
        XRT_CHECK(v.declared->size() == it->second.size(), InvalidArgumentError, "input '", v.name,
                  "' has rank ", v.declared->size(), " but the specialization gives ",
                  shape_str(it->second));
        for (std::size_t d = 0; d < it->second.size(); ++d) {
          const Dim& dd = (*v.declared)[d];
          XRT_CHECK(dd.value < 0 || dd.value == it->second[d], InvalidArgumentError, "input '",
                    v.name, "' dimension ", d, " is fixed to ", dd.value,
                    " but the specialization gives ", it->second[d]);
        }
      }
      v.shape = it->second;
    } else if (v.declared) {
      Shape s;
      bool all = true;
      for (const Dim& d : *v.declared) {
        if (d.value < 0) all = false;
        s.push_back(d.value);
      }
      if (all) v.shape = s;
      else v.shape.reset();
    }
  }
  for (Value& v : g.values)
    if (v.constant.defined()) {
      v.dtype = v.constant.dtype;
      v.dtype_known = true;
      v.shape = v.constant.shape;
    }

  auto log = [&](const std::string& what, int n) {
    plan.pass_log.push_back(what + ": " + std::to_string(n));
  };
  log("constant folding (nodes folded)", passes::infer_and_fold(g, opt.fold_constants));
  log("dead-code elimination (nodes removed)", passes::eliminate_dead_code(g));
  // Fusions run where the options ask for them and the provider says they pay.
  const FusionSupport pays = provider->fusions();
  if (opt.fold_batchnorm && pays.fold_batchnorm)
    log("batchnorm folding (BatchNormalization folded)", passes::fold_batchnorm(g));
  if (opt.fuse && pays.epilogues)
    log("epilogue fusion (ops fused into Conv/MatMul/Gemm)", passes::fuse_epilogues(g));
  if (opt.fuse && pays.elementwise_chains)
    log("elementwise fusion (chains fused)", passes::fuse_elementwise(g));
  log("dead-code elimination (nodes removed)", passes::eliminate_dead_code(g));
  check_kernels(g, *provider, /*skip_constant=*/false);

  // Steps in topological order, then values, then one dispatch + prepare per step
  // (each Decision recorded), then memory.
  for (int k : g.topo_order()) {
    PlanStep st;
    st.node = std::move(g.nodes[k]);
    const ops::OpSchema* schema = ops::find_schema(st.node.op_type);
    XRT_CHECK(schema != nullptr, UnsupportedOperationError, st.node.where(),
              ": a compiler pass produced op '", st.node.op_type, "', which has no schema");
    st.op_key = schema->key;
    plan.steps.push_back(std::move(st));
  }
  build_plan_values(g, plan);
  dispatch_steps(plan, *provider, opt.kernel_policy, opt.exec_policy);
  plan_memory(plan);
  auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::ostringstream os;
  os.precision(3);
  os << "compile time (ms): " << ms;
  plan.pass_log.push_back(os.str());
  return plan;
}

}  // namespace xpuruntime::graph
