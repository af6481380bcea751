// Dispatch and preparation of plan steps (prepare.h).
#include "graph/prepare.h"

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "graph/step_tuning.h"
#include "ops/matmul/matmul_op.h"
#include "ops/matmul/onnx_matmul.h"
#include "xpuruntime/dispatcher.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/op_schema.h"

namespace xpuruntime::graph {
namespace {

// Text for the decision log: bytes outside printable ASCII become '?' (a
// model's names need not be valid UTF-8, and the log is JSON).
std::string printable(const std::string& s) {
  std::string o = s;
  for (char& c : o)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return o;
}

// Attributes as text for the dispatcher's OpContext (internal "_" ones too:
// they describe the fused epilogue, which is part of the case).
std::map<std::string, std::string> attr_text(const Node& n) {
  std::map<std::string, std::string> m;
  for (const auto& [k, a] : n.attrs) {
    if (a.kind == Attr::Kind::kTensor) continue;
    m[printable(k)] = printable(a.text());
  }
  return m;
}

// dtype and shape of a plan value (shape empty when known only at run time).
TensorSpec spec_of(const PlanValue& v) {
  TensorSpec s;
  s.dtype = v.dtype;
  if (v.shape) s.shape = *v.shape;
  return s;
}

bool is_onnx_matmul(const Node& n) {
  return n.domain.empty() && (n.op_type == "MatMul" || n.op_type == "Gemm");
}

// The case a step is dispatched as, on the provider's device, with the plan
// header's execution-policy fields.
OpContext step_context(const ExecutionPlan& plan, const PlanStep& st, std::size_t index,
                       const ExecutionProvider& provider) {
  const Node& n = st.node;
  OpContext ctx;
  ctx.op = st.op_key;
  ctx.node = printable(n.name.empty() ? n.op_type + "_" + std::to_string(index) : n.name);
  ctx.device = provider.device();
  ctx.capability = provider.capability();
  if (is_onnx_matmul(n)) {
    // The matmul op as the GEMM kernels read it: [a, b, (bias)] -> [c], strides
    // for transposes; the node's own epilogue (activation) is part of the step.
    std::vector<std::optional<TensorSpec>> in;
    for (int i : n.inputs) {
      if (i >= 0 && plan.values[i].shape)
        in.emplace_back(spec_of(plan.values[i]));
      else
        in.emplace_back(std::nullopt);
    }
    matmul::onnx_matmul_context(n, in, ctx);
    // B a plan constant (the weights): kernels that pack B once at prepare take it.
    if (n.inputs.size() > 1 && n.inputs[1] >= 0 && plan.values[n.inputs[1]].constant >= 0)
      ctx.attrs[matmul::kBConstantAttr] = "1";
  } else {
    // An omitted optional input ('' in ONNX: Clip without min, Resize without roi) is
    // an empty spec of input 0's dtype: checks that compare an input's dtype with x's,
    // or with the kernel's dtype list, see nothing to refuse in a bound that is not
    // there (a float32 placeholder made every fp16 Clip without a min unrunnable).
    const DType first =
        !n.inputs.empty() && n.inputs[0] >= 0 ? plan.values[n.inputs[0]].dtype : DType::kFloat32;
    for (int i : n.inputs) ctx.inputs.push_back(i >= 0 ? spec_of(plan.values[i]) : TensorSpec{first, {}, {}});
    for (int o : n.outputs)
      if (o >= 0) ctx.outputs.push_back(spec_of(plan.values[o]));
    ctx.attrs = attr_text(n);
  }
  ctx.workspace_limit_bytes = plan.header.workspace_limit_bytes;
  ctx.allow_tf32 = plan.header.allow_tf32;
  ctx.deterministic = plan.header.deterministic;
  return ctx;
}

// Per input of a step: its value when it is a plan constant.
std::vector<HostTensor> step_constants(const ExecutionPlan& plan, const Node& n) {
  std::vector<HostTensor> c(n.inputs.size());
  for (std::size_t k = 0; k < n.inputs.size(); ++k) {
    const int i = n.inputs[k];
    if (i >= 0 && plan.values[i].constant >= 0) c[k] = plan.constants[plan.values[i].constant];
  }
  return c;
}

std::string rejected_reasons(const Decision& d) {
  std::string s;
  for (const Candidate& c : d.candidates) {
    if (c.reason_code.empty()) continue;
    s += (s.empty() ? "" : "; ") + c.kernel + ": " + c.reason_code +
         (c.detail.empty() ? "" : " (" + c.detail + ")");
  }
  return s.empty() ? std::string("no candidates") : s;
}

// Binds steps to kernels; one per plan (compile or load).
class Preparer {
 public:
  Preparer(ExecutionPlan& plan, const ExecutionProvider& provider)
      : plan_(plan), provider_(provider) {}

  // Compile: dispatch under the policies.
  void dispatch(const KernelPolicy& kp, const ExecutionPolicy& ep) {
    kp_ = &kp;
    ep_ = &ep;
    best_ = kp.auto_strategy == KernelPolicy::AutoSelectStrategy::BestPerformance;
    Dispatcher& disp = Dispatcher::instance();
    for (std::size_t s = 0; s < plan_.steps.size(); ++s) {
      PlanStep& st = plan_.steps[s];
      OpContext ctx = step_context(plan_, st, s, provider_);
      ctx.apply(ep);
      Decision d = best_ ? tuned_select(st, ctx) : disp.select(ctx, kp);
      plan_.decisions.push_back(d.to_json());
      XRT_CHECK(!d.chosen.empty(), UnsupportedOperationError, st.node.where(),
                ": no kernel for op '", ctx.op, "' on ", ctx.device.str(),
                " can run this case: ", rejected_reasons(d));
      st.kernel = d.chosen;
      st.algorithm = d.algorithm;
      st.rule = d.rule;
      // A preview shows the choice; preparing would touch the device.
      if (!plan_.header.preview) bind(st, ctx);
    }
  }

  // Load: the recorded kernels, no dispatch.
  void reload() {
    for (std::size_t s = 0; s < plan_.steps.size(); ++s) {
      PlanStep& st = plan_.steps[s];
      // A kernel is bound to a node of its op: refuse a step whose op key is
      // not its op type's (a damaged or hand-edited file).
      const ops::OpSchema* schema = ops::find_schema(st.node.op_type);
      XRT_CHECK(schema != nullptr && schema->key == st.op_key, InvalidModelError,
                "plan file is corrupt: step ", s, " (", st.node.where(), ") has op key '",
                st.op_key, "', but op '", st.node.op_type, "' ",
                schema ? "has key '" + schema->key + "'" : std::string("is unknown to this build"));
      OpContext ctx = step_context(plan_, st, s, provider_);
      bind(st, ctx);
    }
  }

 private:
  // best_performance: the Dispatcher times every candidate kernel and algorithm of the
  // step (prepared as bind() prepares it, on scratch buffers of the step's shapes) once
  // per case, keeps the winner and records the timings and the margin. The losers'
  // prepared kernels and the scratch buffers are released when the selection returns.
  Decision tuned_select(const PlanStep& st, const OpContext& ctx) {
    SelectOptions opt;
    opt.regime = "plan step";
    std::unique_ptr<StepScratch> scratch;  // made for the first candidate (none on a cache hit)
    std::string why = plan_.header.preview
                          ? "an offline preview runs no kernels; a build on the device times them"
                          : StepScratch::untimable(plan_, st);
    if (!why.empty()) {
      opt.untimed_reason = why;
    } else {
      opt.prepare_candidate = [&](const Kernel& k, const std::string& algorithm) {
        if (!scratch) scratch = std::make_unique<StepScratch>(plan_, st, provider_);
        PrepareContext pc = prepare_context(ctx, st.node, algorithm);
        pc.constants = step_constants(plan_, st.node);
        const bool outer = timing_;
        timing_ = true;  // its sub-kernels are chosen, not recorded
        PreparedKernelPtr p;
        try {
          p = k.prepare(pc);
        } catch (...) {
          timing_ = outer;
          throw;
        }
        timing_ = outer;
        XRT_CHECK(p != nullptr, InvalidArgumentError, "kernel '", k.def().name,
                  "' returned no prepared kernel");
        return scratch->runner(std::move(p));
      };
    }
    return Dispatcher::instance().select(ctx, *kp_, opt);
  }

  KernelPtr resolve(const OpContext& ctx, const std::string& kernel,
                    const std::string& where) const {
    KernelPtr k = KernelRegistry::instance().find(ctx.op, kernel);
    if (k && k->def().device == provider_.kernel_device()) return k;
    std::string have;
    for (const KernelDef& d : KernelRegistry::instance().list(ctx.op, provider_.kernel_device()))
      have += (have.empty() ? "" : ", ") + d.name;
    XRT_THROW(UnsupportedOperationError, where, ": kernel '", kernel, "' for op '", ctx.op,
              "' cannot run inside a native plan on device '", provider_.name(), "' (",
              k ? "it runs on " + std::string(k->def().device.name())
                : std::string("this build has no such kernel"),
              "; kernels of op '", ctx.op, "' here: ", have.empty() ? "none" : have,
              "); choose one of those in the KernelPolicy, or recompile the plan "
              "with this build");
  }

  PrepareContext prepare_context(const OpContext& ctx, const Node& node, std::string algorithm) {
    PrepareContext pc;
    pc.ctx = &ctx;
    pc.node = &node;
    pc.algorithm = std::move(algorithm);
    pc.prepare_sub = [this](OpContext& sub_ctx, const Node& sub_node) {
      return sub(sub_ctx, sub_node);
    };
    return pc;
  }

  void bind(PlanStep& st, const OpContext& ctx) {
    st.kernel_ptr = resolve(ctx, st.kernel, st.node.where());
    if (!kp_) {
      // A loaded plan: the kernel must still take the case it was chosen for.
      Support s = KernelRegistry::check(*st.kernel_ptr, ctx);
      XRT_CHECK(s.ok, UnsupportedOperationError, st.node.where(), ": the plan's kernel '",
                st.kernel, "' for op '", ctx.op,
                "' does not support this case in this build: ", s.reason_code, " (", s.detail,
                "); recompile the plan with this build");
    }
    PrepareContext pc = prepare_context(ctx, st.node, st.algorithm);
    pc.constants = step_constants(plan_, st.node);
    auto known = [&](int v) -> std::optional<TensorSpec> {
      if (v < 0 || !plan_.values[v].shape) return std::nullopt;
      return spec_of(plan_.values[v]);
    };
    for (int i : st.node.inputs) pc.node_inputs.push_back(known(i));
    for (int o : st.node.outputs) pc.node_outputs.push_back(known(o));
    const auto t0 = std::chrono::steady_clock::now();
    st.prepared = st.kernel_ptr->prepare(pc);
    add_time("prepare:" + st.kernel, t0);
    XRT_CHECK(st.prepared != nullptr, InvalidArgumentError, st.node.where(), ": kernel '",
              st.kernel, "' returned no prepared kernel");
    // Compile: an algorithm the kernel's library chose goes into the plan, so a load
    // prepares it by name (cuDNN's convolution heuristic took ~5 ms a step).
    if (kp_ && st.algorithm.empty()) st.algorithm = st.prepared->chosen_algorithm();
  }

  // A sub-kernel (a conv's GEMM): dispatched and recorded at compile time,
  // pinned to its recorded Decision when a plan is loaded.
  PreparedKernelPtr sub(OpContext& sc, const Node& sn) {
    sc.device = provider_.device();
    sc.capability = provider_.capability();
    std::string kernel, algorithm;
    if (kp_) {
      sc.apply(*ep_);
      // A sub-kernel runs inside its step's kernel: under best_performance the step is
      // timed whole, with the sub-kernel the rules choose without timing.
      SelectOptions opt;
      if (best_) opt.untimed_reason = "a sub-kernel: its step's kernel is timed whole";
      opt.record = !timing_;  // a candidate prepared only to be timed records nothing
      Decision d = Dispatcher::instance().select(sc, *kp_, opt);
      if (!timing_) plan_.decisions.push_back(d.to_json());
      XRT_CHECK(!d.chosen.empty(), UnsupportedOperationError, "sub-op '", sc.node, "' (", sc.op,
                "): no kernel on ", sc.device.str(), " can run this case: ", rejected_reasons(d));
      kernel = d.chosen;
      algorithm = d.algorithm;
    } else {
      sc.workspace_limit_bytes = plan_.header.workspace_limit_bytes;
      sc.allow_tf32 = plan_.header.allow_tf32;
      sc.deterministic = plan_.header.deterministic;
      recorded(sc, kernel, algorithm);
    }
    KernelPtr k = resolve(sc, kernel, "sub-op '" + sc.node + "'");
    PrepareContext pc = prepare_context(sc, sn, algorithm);
    pc.constants.resize(sn.inputs.size());
    const auto t0 = std::chrono::steady_clock::now();
    PreparedKernelPtr p = k->prepare(pc);
    // Inside its step's prepare: counted there too, so not added to the total.
    add_time("prepare:" + kernel, t0, /*step=*/false);
    return p;
  }

  // Milliseconds since t0 added to timings_ms[key] and, for a step, to "prepare".
  void add_time(const std::string& key, std::chrono::steady_clock::time_point t0,
                bool step = true) {
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    plan_.timings_ms[key] += ms;
    if (step) plan_.timings_ms["prepare"] += ms;
  }

  // The kernel a loaded plan recorded for sub-op (sc.op, sc.node). The decisions are
  // read once per load (a conv net has a sub-op per convolution: parsing every
  // decision for each of them was quadratic).
  void recorded(const OpContext& sc, std::string& kernel, std::string& algorithm) {
    if (!recorded_index_) {
      recorded_index_.emplace();
      for (const std::string& text : plan_.decisions) {
        nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
        if (j.is_discarded() || !j.is_object()) continue;
        std::string chosen = j.value("chosen", "");
        if (chosen.empty()) continue;
        // The first decision of a (op, node) wins, as the scan in file order did.
        recorded_index_->try_emplace({j.value("op", ""), j.value("node", "")}, std::move(chosen),
                                     j.value("algorithm", ""));
      }
    }
    auto it = recorded_index_->find({sc.op, sc.node});
    if (it != recorded_index_->end()) {
      kernel = it->second.first;
      algorithm = it->second.second;
      return;
    }
    XRT_THROW(InvalidModelError,
              "plan file is corrupt or from an incompatible build: it records no ",
              "decision for sub-op '", sc.node, "' (", sc.op, "); recompile the plan");
  }

  ExecutionPlan& plan_;
  const ExecutionProvider& provider_;
  const KernelPolicy* kp_ = nullptr;
  const ExecutionPolicy* ep_ = nullptr;
  bool best_ = false;    // KernelPolicy.auto_strategy == best_performance (compile only)
  bool timing_ = false;  // preparing a candidate only to time it
  // Load: (op, node) -> (kernel, algorithm) of the recorded decisions, built on first use.
  std::optional<std::map<std::pair<std::string, std::string>, std::pair<std::string, std::string>>>
      recorded_index_;
};

}  // namespace

void dispatch_steps(ExecutionPlan& plan, const ExecutionProvider& provider,
                    const KernelPolicy& kernel_policy, const ExecutionPolicy& exec_policy) {
  Preparer(plan, provider).dispatch(kernel_policy, exec_policy);
}

void prepare_loaded_steps(ExecutionPlan& plan) {
  ProviderPtr provider = ProviderRegistry::instance().get(plan.header.device);
  Preparer(plan, *provider).reload();
}

}  // namespace xpuruntime::graph
