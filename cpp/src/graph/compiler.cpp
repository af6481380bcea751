// compile(): runs the passes, dispatches every node, plans memory, builds the plan.
#include "xpuruntime/graph/compiler.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <sstream>

#include "backends/cpu/ops/cpu_op.h"
#include "backends/cpu/matmul/cpu_matmul_kernels.h"
#include "backends/cpu/ops/gemm_call.h"
#include "graph/passes.h"
#include "graph/planner.h"
#include "xpuruntime/dispatcher.h"
#include "xpuruntime/error.h"

namespace xpuruntime::graph {
namespace {

TensorSpec spec_of(const Value& v) {
  TensorSpec s;
  s.dtype = v.dtype;
  if (v.constant.defined()) s.shape = v.constant.shape;
  else if (v.shape) s.shape = *v.shape;
  return s;
}

// Text for the decision log: bytes outside printable ASCII become '?' (a model's
// names need not be valid UTF-8, and the log is JSON).
std::string printable(const std::string& s) {
  std::string o = s;
  for (char& c : o)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return o;
}

// Attributes as text for the dispatcher's OpContext (internal "_" ones too: they
// describe the fused epilogue, which is part of the case).
std::map<std::string, std::string> attr_text(const Node& n) {
  std::map<std::string, std::string> m;
  for (const auto& [k, a] : n.attrs) {
    if (k == "_gemm" || a.kind == Attr::Kind::kTensor) continue;
    m[printable(k)] = printable(a.text());
  }
  return m;
}

void check_supported(const Graph& g) {
  std::set<std::string> missing;
  for (const Node& n : g.nodes) {
    if (!n.domain.empty() && n.domain != "ai.onnx" && n.domain != "xrt") {
      XRT_THROW(UnsupportedOperationError, n.where(), ": op domain '", n.domain,
                "' is not supported by the native CPU engine (only the default ONNX domain)");
    }
    if (!cpu::op_supported(n.op_type)) {
      std::ostringstream os;
      for (const auto& t : cpu::supported_op_types()) os << t << " ";
      XRT_THROW(UnsupportedOperationError, n.where(), ": op '", n.op_type,
                "' is not supported by the native CPU engine. Supported ops: ", os.str(),
                "- use engine='onnxruntime' for this model, or see docs/ops.md");
    }
  }
}

std::string join_decision(const Decision& d) { return d.to_json(); }

// MatMul / Gemm as the matmul op (ops/matmul/matmul_op.h) in the form the
// executor will call it (cpu/ops/gemm.cpp): a, b (transposes as strides), the fused
// bias row, and c. MatMul batches map to one tall GEMM (shared B), one batched GEMM
// (same batch shapes), or one GEMM per batch (other broadcasts).
void matmul_context(const Graph& g, const Node& n, OpContext& ctx) {
  const Value& va = g.values[n.inputs[0]];
  const Value& vb = g.values[n.inputs[1]];
  XRT_CHECK((va.shape || va.constant.defined()) && (vb.shape || vb.constant.defined()),
            UnsupportedOperationError, n.where(),
            ": the shapes of this matmul are only known at run time (they depend on input values), "
            "so no matmul kernel can be chosen at compile time; the native engine needs shapes "
            "that follow from the input shapes");
  const TensorSpec a = spec_of(va);
  const TensorSpec b = spec_of(vb);
  TensorSpec ta = a, tb = b, c;
  c.dtype = a.dtype;
  if (n.op_type == "Gemm") {
    if (n.attr_int("transA", 0) && a.shape.size() == 2) {
      ta.shape = {a.shape[1], a.shape[0]};
      ta.strides = {1, a.shape[1]};
    }
    if (n.attr_int("transB", 0) && b.shape.size() == 2) {
      tb.shape = {b.shape[1], b.shape[0]};
      tb.strides = {1, b.shape[1]};
    }
    c.shape = {ta.shape.empty() ? 0 : ta.shape[0], tb.shape.empty() ? 0 : tb.shape.back()};
  } else {
    Shape as = a.shape, bs = b.shape;
    if (as.size() == 1) as.insert(as.begin(), 1);
    if (bs.size() == 1) bs.push_back(1);
    const int64_t m = as[as.size() - 2], k = as.back(), nn = bs.back();
    Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
    const std::size_t br = std::max(ab.size(), bb.size());
    Shape batch(br, 1);
    for (std::size_t i = 0; i < br; ++i) {
      const int64_t da = i + ab.size() >= br ? ab[i + ab.size() - br] : 1;
      const int64_t db = i + bb.size() >= br ? bb[i + bb.size() - br] : 1;
      batch[i] = std::max(da, db);
    }
    auto padded = [&](const Shape& s) {
      Shape f(br - s.size(), 1);
      f.insert(f.end(), s.begin(), s.end());
      return f;
    };
    const int64_t nb = shape_numel(batch);
    if (shape_numel(bb) == 1) {
      ta.shape = {nb * m, k};
      tb.shape = {k, nn};
      c.shape = {nb * m, nn};
    } else if ((shape_numel(ab) == 1 || padded(ab) == batch) && padded(bb) == batch) {
      Shape x = batch, y = batch, z = batch;
      x.insert(x.end(), {m, k});
      y.insert(y.end(), {k, nn});
      z.insert(z.end(), {m, nn});
      ta.shape = shape_numel(ab) == 1 ? Shape{m, k} : x;
      tb.shape = y;
      c.shape = z;
    } else {
      ta.shape = {m, k};
      tb.shape = {k, nn};
      c.shape = {m, nn};
    }
    ta.strides.clear();
    tb.strides.clear();
  }
  ctx.inputs = {ta, tb};
  if (n.op_type == "MatMul" && n.attr_int("_bias", 0) && n.inputs.size() > 2 && n.inputs[2] >= 0) {
    TensorSpec bias = spec_of(g.values[n.inputs[2]]);
    bias.shape = {shape_numel(bias.shape)};
    ctx.inputs.push_back(bias);
  }
  ctx.outputs = {c};
}
}  // namespace

std::string policy_fingerprint(const KernelPolicy& kp, const ExecutionPolicy& ep) {
  return sha256_hex(kp.canonical_json() + "\n" + ep.canonical_json());
}

ExecutionPlan compile(Graph g, const CompileOptions& opt) {
  XRT_CHECK(opt.device == "cpu", UnsupportedOperationError, "the native engine compiles for 'cpu' ",
            "in this build; device '", opt.device, "' is not available to it yet");
  cpu::ensure_cpu_op_kernels_registered();
  ensure_cpu_matmul_kernels_registered();
  auto t0 = std::chrono::steady_clock::now();
  ExecutionPlan plan;
  plan.header.device = opt.device;
  plan.header.model_hash = opt.model_hash;
  plan.header.policy_fingerprint = policy_fingerprint(opt.kernel_policy, opt.exec_policy);
  plan.header.producer = "xpuruntime 0.1.0";

  g.validate();
  check_supported(g);
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
  if (opt.fold_batchnorm) log("batchnorm folding (BatchNormalization folded)", passes::fold_batchnorm(g));
  if (opt.fuse) {
    log("epilogue fusion (ops fused into Conv/MatMul/Gemm)", passes::fuse_epilogues(g));
    log("elementwise fusion (chains fused)", passes::fuse_elementwise(g));
  }
  log("dead-code elimination (nodes removed)", passes::eliminate_dead_code(g));

  // Dispatch every node; record the Decisions.
  Dispatcher& disp = Dispatcher::instance();
  std::vector<int> order = g.topo_order();
  std::vector<PlanStep> steps;
  for (int k : order) {
    Node& n = g.nodes[k];
    const cpu::OpDef* def0 = cpu::op_defs(n.op_type).front();
    OpContext ctx;
    ctx.op = def0->key;
    ctx.node = printable(n.name.empty() ? n.op_type + "_" + std::to_string(k) : n.name);
    ctx.device = Device::cpu();
    if (def0->uses_gemm) {
      // The matmul op as the matmul kernels read it: [a, b, (bias)] -> [c], strides
      // for transposes; our own epilogues (activation) run after the GEMM.
      matmul_context(g, n, ctx);
    } else {
      for (int i : n.inputs)
        ctx.inputs.push_back(i >= 0 ? spec_of(g.values[i]) : TensorSpec{});
      for (int o : n.outputs)
        if (o >= 0) ctx.outputs.push_back(spec_of(g.values[o]));
      ctx.attrs = attr_text(n);
    }
    ctx.apply(opt.exec_policy);
    Decision d = disp.select(ctx, opt.kernel_policy);
    plan.decisions.push_back(join_decision(d));
    PlanStep st;
    st.op_key = def0->key;
    st.kernel = d.chosen;
    st.rule = d.rule;
    if (def0->uses_gemm) {
      n.attrs["_gemm"] = Attr::of_string(d.chosen);
    } else {
      XRT_CHECK(cpu::find_op_def(n.op_type, d.chosen) != nullptr, UnsupportedOperationError,
                n.where(), ": the policy chose kernel '", d.chosen, "' for op '", def0->key,
                "', which cannot run inside a native CPU plan");
      if (n.op_type == "Conv" && d.chosen == "cpu_im2col") {
        // The convolution's GEMM is a dispatch of its own (op key matmul).
        OpContext mc;
        mc.op = "matmul";
        mc.node = ctx.node + "/gemm";
        mc.device = Device::cpu();
        const TensorSpec w = spec_of(g.values[n.inputs[1]]);
        const TensorSpec y = spec_of(g.values[n.outputs[0]]);
        const int64_t group = n.attr_int("group", 1);
        int64_t kk = 1, sp = 1;
        for (std::size_t i = 1; i < w.shape.size(); ++i) kk *= w.shape[i];
        for (std::size_t i = 2; i < y.shape.size(); ++i) sp *= y.shape[i];
        const int64_t mg = w.shape.empty() ? 0 : w.shape[0] / std::max<int64_t>(1, group);
        mc.inputs = {TensorSpec{w.dtype, {mg, kk}, {}}, TensorSpec{w.dtype, {kk, sp}, {}}};
        mc.outputs = {TensorSpec{w.dtype, {mg, sp}, {}}};
        mc.apply(opt.exec_policy);
        Decision md = disp.select(mc, opt.kernel_policy);
        plan.decisions.push_back(join_decision(md));
        n.attrs["_gemm"] = Attr::of_string(md.chosen);
      }
    }
    st.node = n;
    steps.push_back(std::move(st));
  }
  plan.steps = std::move(steps);
  build_plan_values(g, plan);
  plan_memory(plan);
  auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::ostringstream os;
  os.precision(3);
  os << "compile time (ms): " << ms;
  plan.pass_log.push_back(os.str());
  return plan;
}

}  // namespace xpuruntime::graph
