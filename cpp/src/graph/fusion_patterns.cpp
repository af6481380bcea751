// Helpers of the pattern fusions (fusion_patterns.h).
#include "graph/fusion_patterns.h"

#include <algorithm>

#include "xpuruntime/decision.h"
#include "xpuruntime/ops/op_schema.h"

namespace xpuruntime::graph::passes::patterns {

bool is_output(const Graph& g, int v) {
  return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
}

const Node* producer(const Graph& g, int v) {
  if (v < 0 || g.values[v].constant.defined()) return nullptr;
  const int p = g.values[v].producer;
  return p < 0 || g.nodes[p].op_type.empty() ? nullptr : &g.nodes[p];
}

bool single_use(const Graph& g, const Consumers& cons, int v) {
  if (v < 0 || cons[v].size() != 1 || is_output(g, v)) return false;
  const Node& n = g.nodes[cons[v][0]];
  return std::count(n.inputs.begin(), n.inputs.end(), v) == 1;
}

std::optional<double> scalar_constant(const Graph& g, int v) {
  if (v < 0 || !g.values[v].constant.defined() || g.values[v].constant.numel() != 1)
    return std::nullopt;
  if (!is_float(g.values[v].constant.dtype)) return std::nullopt;
  return g.values[v].constant.float_at(0);
}

std::optional<TensorSpec> spec_of(const Graph& g, int v) {
  if (v < 0) return std::nullopt;
  const Value& val = g.values[v];
  if (val.constant.defined()) return TensorSpec{val.constant.dtype, val.constant.shape, {}};
  if (!val.shape || !val.dtype_known) return std::nullopt;
  return TensorSpec{val.dtype, *val.shape, {}};
}

bool is_float(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16 ||
         t == DType::kFloat64;
}

namespace {

OpContext context_of(const Candidate& c, const ExecutionProvider& provider) {
  const ops::OpSchema* schema = ops::find_schema(c.node.op_type);
  OpContext ctx;
  ctx.op = schema ? schema->key : ops::op_key(c.node.op_type);
  ctx.node = c.node.name;
  ctx.device = provider.device();
  ctx.capability = provider.capability();
  ctx.inputs = c.inputs;
  ctx.outputs = c.outputs;
  for (const auto& [k, a] : c.node.attrs)
    if (a.kind != Attr::Kind::kTensor) ctx.attrs[k] = a.text();
  return ctx;
}

bool plan_kernel(const KernelDef& def, const ExecutionProvider& provider) {
  return def.runs_on(provider.kernel_device()) && !def.requested_only && !def.allocates_outputs;
}

}  // namespace

bool any_kernel_supports(const Candidate& c, const ExecutionProvider& provider) {
  const OpContext ctx = context_of(c, provider);
  for (const KernelPtr& k : KernelRegistry::instance().kernels(ctx.op))
    if (plan_kernel(k->def(), provider) && KernelRegistry::check(*k, ctx).ok) return true;
  return false;
}

bool kernel_runs(const Candidate& c, const ExecutionProvider& provider,
                 std::vector<std::string>& decisions) {
  const OpContext ctx = context_of(c, provider);
  Decision d;
  d.op = "fusion";
  d.node = c.node.name;
  d.device = ctx.device.str();
  for (const TensorSpec& s : c.inputs) {
    d.dtypes.emplace_back(dtype_name(s.dtype));
    d.shapes.push_back(s.shape);
  }
  d.key = ctx.case_key();
  for (const KernelPtr& k : KernelRegistry::instance().kernels(ctx.op)) {
    const KernelDef& def = k->def();
    if (!plan_kernel(def, provider)) continue;
    const Support s = KernelRegistry::check(*k, ctx);
    xpuruntime::Candidate cand;
    cand.kernel = def.name;
    cand.verdict = s.ok ? verdict::kSupported : verdict::kRejected;
    cand.reason_code = s.reason_code;
    cand.detail = s.detail;
    d.candidates.push_back(std::move(cand));
    if (s.ok && d.chosen.empty()) d.chosen = c.node.op_type;
  }
  if (d.chosen.empty()) {
    d.rule = rule::kNone;
    d.detail = c.pattern + ": left unfused, no kernel on " + provider.name() + " runs the fused " +
               c.node.op_type + " (" + ctx.op + ")";
  } else {
    d.rule = "fusion.pattern";
    d.detail = c.pattern + ": fused into one " + c.node.op_type + " node";
  }
  decisions.push_back(d.to_json());
  return !d.chosen.empty();
}

int new_value(Graph& g, const std::string& prefix, DType dtype, const Shape& shape) {
  const int v = g.value_id(fresh_name(g, prefix));
  g.values[v].dtype = dtype;
  g.values[v].dtype_known = true;
  g.values[v].shape = shape;
  return v;
}

int int64_constant(Graph& g, const std::string& prefix, const std::vector<int64_t>& vals) {
  HostTensor t = HostTensor::alloc(DType::kInt64, {static_cast<int64_t>(vals.size())});
  std::copy(vals.begin(), vals.end(), t.ptr<int64_t>());
  const int v = new_value(g, prefix, DType::kInt64, t.shape);
  g.values[v].constant = std::move(t);
  return v;
}

int ones_constant(Graph& g, DType dt, int64_t c, const std::string& prefix) {
  HostTensor t = HostTensor::alloc(dt, {c});
  for (int64_t i = 0; i < c; ++i) {
    switch (dt) {
      case DType::kFloat64:
        t.ptr<double>()[i] = 1.0;
        break;
      case DType::kFloat16:
        t.ptr<uint16_t>()[i] = 0x3C00;
        break;
      case DType::kBFloat16:
        t.ptr<uint16_t>()[i] = 0x3F80;
        break;
      default:
        t.ptr<float>()[i] = 1.0f;
        break;
    }
  }
  const int v = new_value(g, prefix, dt, {c});
  g.values[v].constant = t;
  return v;
}

std::string unique_node_name(const Graph& g, const std::string& base) {
  auto taken = [&](const std::string& n) {
    return std::any_of(g.nodes.begin(), g.nodes.end(), [&](const Node& x) { return x.name == n; });
  };
  if (!taken(base)) return base;
  for (int i = 1;; ++i)
    if (!taken(base + "_" + std::to_string(i))) return base + "_" + std::to_string(i);
}

}  // namespace xpuruntime::graph::passes::patterns
