// compile(): runs the passes, dispatches every node, plans memory, builds the plan.
#include "xpuruntime/graph/compiler.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <sstream>

#include "graph/passes.h"
#include "graph/planner.h"
#include "graph/prepare.h"
#include "xpuruntime/decision.h"
#include "xpuruntime/error.h"
#include "xpuruntime/host_threads.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/provider.h"
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

// What the engine cannot run in a graph: for each op (domain-qualified outside the
// default domain), the names of its nodes, in graph order.
using Unsupported = std::map<std::string, std::vector<std::string>>;

bool known_domain(const Node& n) {
  return n.domain.empty() || n.domain == "ai.onnx" || n.domain == "xrt";
}

// Ops with no schema (or from another domain), and - for a provider - ops with no
// kernel on its device, except (with skip_constant) the nodes that compute only from
// constants: a Constant, or a shape computation, folds at compile time on the CPU
// kernels and needs no device kernel.
Unsupported find_unsupported(const Graph& g, const ExecutionProvider* provider,
                             bool skip_constant) {
  // Ops a pass lowers to others where it can (Einsum to MatMul): checked again after
  // the passes, when what is left of them needs a kernel.
  const bool before_passes = skip_constant;
  Unsupported bad;
  std::vector<char> constant(g.values.size(), 0);
  for (std::size_t v = 0; v < g.values.size(); ++v) constant[v] = g.values[v].constant.defined();
  for (int k : g.topo_order()) {
    const Node& n = g.nodes[k];
    const ops::OpSchema* schema = known_domain(n) ? ops::find_schema(n.op_type) : nullptr;
    if (schema == nullptr) {
      bad[n.domain.empty() || n.domain == "ai.onnx" ? n.op_type : n.domain + "." + n.op_type]
          .push_back(n.name);
      continue;
    }
    if (provider == nullptr) continue;
    if (skip_constant && schema->foldable &&
        std::all_of(n.inputs.begin(), n.inputs.end(), [&](int i) { return i < 0 || constant[i]; })) {
      for (int o : n.outputs)
        if (o >= 0) constant[o] = 1;
      continue;
    }
    if (before_passes && n.op_type == "Einsum") continue;
    if (!has_kernel(schema->key, *provider)) bad[n.op_type].push_back(n.name);
  }
  return bad;
}

// One error for everything a model needs that the engine lacks: the first node in
// graph order (what a reader looks at first), then every unsupported op with its
// node count and first node names, then the ops the engine runs there.
void throw_unsupported(const Graph& g, const Unsupported& bad, const ExecutionProvider* provider) {
  if (bad.empty()) return;
  std::string first, first_op;
  for (int k : g.topo_order()) {
    const Node& n = g.nodes[k];
    for (const std::string& op : {n.op_type, n.domain + "." + n.op_type}) {
      auto it = bad.find(op);
      if (first.empty() && it != bad.end() &&
          std::find(it->second.begin(), it->second.end(), n.name) != it->second.end()) {
        first = n.where();
        first_op = op;
      }
    }
  }
  std::size_t nodes = 0;
  std::ostringstream list;
  for (const auto& [op, names] : bad) {
    list << (nodes ? "; " : "") << op << " (" << names.size()
         << (names.size() == 1 ? " node: " : " nodes: ");
    for (std::size_t i = 0; i < names.size() && i < 5; ++i)
      list << (i ? ", '" : "'") << names[i] << "'";
    if (names.size() > 5) list << " and " << names.size() - 5 << " more";
    list << ")";
    nodes += names.size();
  }
  std::ostringstream runs;
  for (const std::string& t : ops::schema_op_types()) {
    const ops::OpSchema* s = ops::find_schema(t);
    if (s->domain.empty() && (provider == nullptr || has_kernel(s->key, *provider)))
      runs << t << " ";
  }
  const std::string where = provider ? " on device '" + provider->name() + "'" : "";
  XRT_THROW(UnsupportedOperationError, first, ": op '", first_op,
            "' is not supported by the native engine", where, ". All ", bad.size(),
            bad.size() == 1 ? " unsupported op" : " unsupported ops", " of the model (", nodes,
            nodes == 1 ? " node): " : " nodes): ", list.str(), ". Ops it runs", where, ": ",
            runs.str(), "- use engine='onnxruntime' for this model, or see docs/ops.md");
}

// The host threads every run of the plan uses, as the engine-policy Decision the
// other engines record for their thread knobs (explain() lists it with the kernels).
Decision threads_decision(int threads, const ExecutionProvider& provider) {
  Decision d;
  d.op = "engine.policy";
  d.node = "native:threads";
  d.device = provider.device().str();
  const int used = clamp_host_threads(threads);
  d.chosen = "threads=" + (threads > 0 ? std::to_string(used) : std::string("default"));
  d.rule = threads > 0 ? (used < threads ? "policy.threads clamped" : "policy.threads") : "default";
  d.detail = threads > 0 ? "ExecutionPolicy.threads=" + std::to_string(threads) +
                               ": each run uses at most that many host threads (the calling "
                               "thread included) in the native kernels and GEMMs"
                         : "ExecutionPolicy.threads=0: the provider's default (CPU: "
                           "XRT_NUM_THREADS, else OMP_NUM_THREADS, else the hardware's threads)";
  if (used < threads)
    d.detail += "; clamped to " + std::to_string(used) +
                ", the most this process runs its loops on: " + host_threads_reason() +
                " (more threads than the process may start would end it in the OpenMP runtime)";
  Candidate c;
  c.kernel = d.chosen;
  c.verdict = verdict::kSupported;
  c.detail = d.detail;
  d.candidates.push_back(c);
  return d;
}

// The provider as an offline preview sees it (CompileOptions.dry_run): the target's
// capability and environment, the real provider's fusions and kernels, and no
// device: nothing can be uploaded or run through it.
class PreviewProvider final : public ExecutionProvider {
 public:
  PreviewProvider(ProviderPtr base, const std::string& target)
      : base_(std::move(base)),
        capability_(base_->target_capability(target)),
        environment_(base_->target_environment(target)) {}
  const std::string& name() const override { return base_->name(); }
  DeviceKind kernel_device() const override { return base_->kernel_device(); }
  Device device() const override { return Device{base_->kernel_device(), 0}; }
  int capability() const override { return capability_; }
  FusionSupport fusions() const override { return base_->fusions(); }
  bool takes_epilogue(const std::string& op_type, const ops::Epilogue& e,
                      DType dtype) const override {
    return base_->takes_epilogue(op_type, e, dtype);
  }
  std::map<std::string, std::string> environment() const override { return environment_; }
  bool host_memory() const override { return base_->host_memory(); }
  std::shared_ptr<const DeviceConstants> upload_constants(const std::vector<HostTensor>&,
                                                          const std::vector<bool>&) const override {
    refuse();
  }
  std::unique_ptr<RunResources> begin_run(std::size_t, std::size_t) const override { refuse(); }

 private:
  [[noreturn]] void refuse() const {
    XRT_THROW(InvalidArgumentError, "a preview plan (compiled with dry_run) for device '",
              name(), "' only shows what would run; compile without dry_run to run it");
  }
  ProviderPtr base_;
  int capability_;
  std::map<std::string, std::string> environment_;
};

}  // namespace

void check_supported(const Graph& g, const std::string& device) {
  const ProviderPtr provider = ProviderRegistry::instance().get(device);
  g.validate();
  throw_unsupported(g, find_unsupported(g, provider.get(), /*skip_constant=*/true),
                    provider.get());
}

std::vector<NodeSupport> node_support(const Graph& g, const std::string& device) {
  const ProviderPtr provider = ProviderRegistry::instance().get(device);
  g.validate();
  const KernelRegistry& registry = KernelRegistry::instance();
  std::vector<char> constant(g.values.size(), 0);
  for (std::size_t v = 0; v < g.values.size(); ++v) constant[v] = g.values[v].constant.defined();
  std::vector<NodeSupport> out;
  for (int k : g.topo_order()) {
    const Node& n = g.nodes[k];
    NodeSupport s;
    s.node = n.name;
    s.op_type = n.op_type;
    s.domain = n.domain;
    const ops::OpSchema* schema = known_domain(n) ? ops::find_schema(n.op_type) : nullptr;
    if (schema == nullptr) {
      s.reason_code = reason::kOpUnsupported;
      s.detail = known_domain(n) ? "op '" + n.op_type + "' has no schema in the native engine (docs/ops.md)"
                                 : "domain '" + n.domain + "' is not implemented by the native engine";
      out.push_back(std::move(s));
      continue;
    }
    s.op_key = schema->key;
    for (const KernelDef& d : registry.list(schema->key, provider->kernel_device()))
      if (!d.requested_only && !d.allocates_outputs) s.kernels.push_back(d.name);
    if (schema->foldable &&
        std::all_of(n.inputs.begin(), n.inputs.end(), [&](int i) { return i < 0 || constant[i]; })) {
      for (int o : n.outputs)
        if (o >= 0) constant[o] = 1;
      s.supported = true;
      s.folds = true;
      s.detail = "computed from constants only: folded at compile time";
    } else if (s.kernels.empty()) {
      s.reason_code = reason::kNoKernel;
      s.detail = "no kernel for op '" + schema->key + "' on device '" + provider->name() + "'";
    } else {
      s.supported = true;
      s.detail = "kernels on '" + provider->name() + "'";
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string policy_fingerprint(const KernelPolicy& kp, const ExecutionPolicy& ep) {
  return sha256_hex(kp.canonical_json() + "\n" + ep.canonical_json());
}

ExecutionPlan compile(Graph g, const CompileOptions& opt) {
  ProviderPtr provider = ProviderRegistry::instance().get(opt.device);
  XRT_CHECK(opt.dry_run || opt.target.empty(), InvalidArgumentError, "compile target '",
            opt.target, "' is for an offline preview: pass dry_run=True, or leave the target "
            "empty to compile for this machine's ", opt.device, " device");
  if (opt.dry_run) provider = std::make_shared<PreviewProvider>(provider, opt.target);
  auto t0 = std::chrono::steady_clock::now();
  ExecutionPlan plan;
  plan.header.preview = opt.dry_run;
  plan.header.device = provider->name();
  plan.header.model_hash = opt.model_hash;
  plan.header.policy_fingerprint = policy_fingerprint(opt.kernel_policy, opt.exec_policy);
  plan.header.producer = "xpuruntime 0.1.0";
  plan.header.workspace_limit_bytes = opt.exec_policy.workspace_limit_bytes;
  plan.header.allow_tf32 = opt.exec_policy.allow_tf32;
  plan.header.deterministic = opt.exec_policy.deterministic;
  plan.header.threads = opt.exec_policy.threads;
  // Where the kernels are chosen (GPU architecture, library versions): a loader
  // refuses the plan elsewhere.
  plan.header.environment = provider->environment();

  g.validate();
  // Every op without a schema or without a kernel on the device, all reported at once,
  // before the passes (which need the schemas) and again for the nodes left after them.
  throw_unsupported(g, find_unsupported(g, provider.get(), /*skip_constant=*/true),
                    provider.get());
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
  if (opt.fold_constants)
    log("shared weights read transposed by Gemm (MatMuls rewritten)",
        passes::gemm_reads_shared_weights(g));
  log("constant folding (nodes folded)", passes::infer_and_fold(g, opt.fold_constants));
  log("dead-code elimination (nodes removed)", passes::eliminate_dead_code(g));
  // With the folding: both simplify the graph as written (fold_constants=False keeps it).
  if (opt.fold_constants) {
    log("common-subexpression elimination (nodes merged)",
        passes::eliminate_common_subexpressions(g));
    log("no-op elimination (nodes made views)", passes::eliminate_noops(g));
  }
  // Einsum as GEMMs: every device runs MatMul; CUDA has no Einsum kernel.
  log("einsum lowering (Einsum to MatMul)", passes::lower_einsum(g));
  // Fusions run where the options ask for them and the provider says they pay.
  const FusionSupport pays = provider->fusions();
  // BatchNormalization folds into the weights in fp32, before the precision pass
  // rounds them once (folding already-rounded bf16 weights and statistics rounds twice).
  if (opt.fold_batchnorm && pays.fold_batchnorm) {
    log("batchnorm folding (BatchNormalization folded)", passes::fold_batchnorm(g));
    log("batchnorm folding into MatMul (BatchNormalization folded)",
        passes::fold_batchnorm_into_matmul(g));
  }
  // Precision: after folding (constants are converted once, in their final form),
  // before fusion and dispatch (kernels are chosen for the narrowed dtypes).
  using Precision = ExecutionPolicy::Precision;
  if (opt.exec_policy.precision == Precision::FP16 || opt.exec_policy.precision == Precision::BF16) {
    const DType to = opt.exec_policy.precision == Precision::FP16 ? DType::kFloat16 : DType::kBFloat16;
    log("precision lowering to " + std::string(dtype_name(to)) + " (values and casts)",
        passes::lower_precision(g, to, opt.exec_policy.keep_io_types));
  } else {
    XRT_CHECK(opt.exec_policy.precision == Precision::FP32, UnsupportedOperationError,
              "the native engine compiles float models in fp32, fp16 or bf16; precision '",
              to_string(opt.exec_policy.precision),
              "' needs a quantized model (use engine='onnxruntime' or 'openvino' for int8)");
  }
  // The patterns first: the epilogue and elementwise fusions would take their pieces.
  if (opt.fuse && pays.patterns) {
    log("layernorm pattern fusion (subgraphs fused)",
        passes::fuse_layernorm_patterns(g, *provider, plan.decisions));
    log("rmsnorm pattern fusion (subgraphs fused)",
        passes::fuse_rmsnorm_patterns(g, *provider, plan.decisions));
    log("rotary pattern fusion (subgraphs fused)",
        passes::fuse_rotary_patterns(g, *provider, plan.decisions));
    log("attention pattern fusion (subgraphs fused)",
        passes::fuse_attention_patterns(g, *provider, plan.decisions));
    log("attention layout (head transposes folded)",
        passes::fold_attention_transposes(g, *provider, plan.decisions));
    log("gelu pattern fusion (subgraphs fused)",
        passes::fuse_gelu_patterns(g, *provider, plan.decisions));
  }
  if (opt.fuse && pays.epilogues)
    log("epilogue fusion (ops fused into Conv/MatMul/Gemm)", passes::fuse_epilogues(g, provider.get()));
  if (opt.fuse && pays.elementwise_chains)
    log("elementwise fusion (chains fused)", passes::fuse_elementwise(g, provider.get()));
  // Layouts after the fusions (an NhwcConv keeps its fused epilogue), then the
  // elementwise fusion again for what the layout pass created (BatchNormalization's
  // per-channel Mul and Add).
  if (opt.fuse) {
    const int n = passes::to_channels_last(g, *provider, opt.kernel_policy, plan.decisions);
    log("channels-last layout (nodes converted)", n);
    // Views first: a layout Transpose back to NCHW, a flattening Reshape and the
    // model's token Transpose become one Reshape (the nodes it replaces removed), through
    // which an activation then fuses into the NhwcConv before it (a depthwise conv
    // between PVT-style token views).
    log("transpose-reshape-transpose folding (chains made views)",
        passes::fold_transpose_reshape_transpose(g));
    log("unit-dim transposes (made views)", passes::unit_dim_transposes_as_views(g));
    log("dead-code elimination (nodes removed)", passes::eliminate_dead_code(g));
    // Activations a channels-last kernel applies that its NCHW Conv's would not (the
    // depthwise kernel's Clip, HardSwish, ...).
    if (n > 0 && pays.epilogues)
      log("epilogue fusion (ops fused into NhwcConv)", passes::fuse_epilogues(g, provider.get()));
    if (pays.single_pixel_conv_gemms)
      log("single-pixel 1x1 convolutions as GEMMs (convolutions converted)",
          passes::single_pixel_convs_as_gemms(g, *provider, opt.kernel_policy));
    if (n > 0 && pays.elementwise_chains)
      log("elementwise fusion (chains fused)", passes::fuse_elementwise(g, provider.get()));
  }
  log("dead-code elimination (nodes removed)", passes::eliminate_dead_code(g));
  throw_unsupported(g, find_unsupported(g, provider.get(), /*skip_constant=*/false),
                    provider.get());

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
  plan.timings_ms["passes"] =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  dispatch_steps(plan, *provider, opt.kernel_policy, opt.exec_policy);
  plan.decisions.push_back(threads_decision(opt.exec_policy.threads, *provider).to_json());
  // Device plans place each step's workspace in the arena (see PlanStep); host plans
  // keep one shared workspace (their kernels' scratch is small, and the CPU arena is
  // sized against ONNX Runtime's).
  plan_memory(plan, !provider->host_memory() && !plan.header.preview);
  auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::ostringstream os;
  os.precision(3);
  os << "compile time (ms): " << ms;
  plan.pass_log.push_back(os.str());
  return plan;
}

}  // namespace xpuruntime::graph
