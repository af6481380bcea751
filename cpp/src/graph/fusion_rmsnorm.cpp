// The decomposed RMSNorm -> one RMSNormalization node (ONNX opset 23). Llama,
// Qwen, Mistral, Gemma and T5 compute it so, and torch exports it op by op:
//
//   ms  = ReduceMean(Pow(x, 2) | Mul(x, x), [-1])
//   s   = Sqrt(Add(ms, eps))
//   y   = Div(x, s)  |  Mul(x, Reciprocal(s))  |  Mul(x, Div(1, s))
//   y   = Mul(y, gamma)                                     (optional)
//
// with a model's own Casts to the dtype a value already has anywhere in between
// (the
// `.to(torch.float32)` of an fp32 export, or what the precision pass left).
// Five to eight kernels become one that reads the row twice from cache instead
// of writing and reading four intermediates. The match is exact or nothing, as
// the LayerNorm pattern's (fusion_layernorm.cpp, which runs first: its variance
// half would match here otherwise): the mean over the last axis only with
// keepdims, eps a constant scalar, gamma a constant of the last dimension's
// size, no intermediate read outside the pattern or a graph output. Statistics
// are float32 (stash_type 1).
#include <algorithm>
#include <optional>

#include "graph/fusion_patterns.h"

namespace xpuruntime::graph::passes {
namespace {

using namespace patterns;

bool binary(const Node &n, const char *op) { return n.op_type == op && n.inputs.size() == 2; }

int other_input(const Node &n, int v) { return n.inputs[0] == v ? n.inputs[1] : n.inputs[0]; }

struct RmsMatch {
  int x = -1, out = -1;
  int64_t c = 0;
  double eps = 0;
  int gamma = -1;
  std::vector<int> nodes;
  std::string pattern;
};

class Matcher {
 public:
  Matcher(const Graph &g, const Consumers &cons) : g_(g), cons_(cons) {}

  // The value v stands for after the no-op Casts that are its only reader (each
  // added to `nodes`): the value the pattern's next node reads.
  int skip_noop_casts(int v, std::vector<int> &nodes) const {
    while (true) {
      const int k = only(v);
      if (k < 0) return v;
      const Node &n = g_.nodes[k];
      if (n.op_type != "Cast" || n.outputs.empty() ||
          g_.values[n.outputs[0]].dtype != g_.values[v].dtype)
        return v;
      nodes.push_back(k);
      v = n.outputs[0];
    }
  }

  // The single reader of v (not a graph output), or -1.
  int only(int v) const { return single_use(g_, cons_, v) ? cons_[v][0] : -1; }

  std::optional<RmsMatch> match(int r_index) const {
    const Node &r = g_.nodes[r_index];
    if (r.inputs.empty() || r.outputs.empty() || r.attr_int("keepdims", 1) != 1)
      return std::nullopt;
    RmsMatch m;
    // The squaring node and x.
    const Node *sq = producer(g_, r.inputs[0]);
    if (sq == nullptr || only(r.inputs[0]) != r_index) return std::nullopt;
    int x = -1;
    if (binary(*sq, "Pow") && scalar_constant(g_, sq->inputs[1]) == std::optional<double>(2.0))
      x = sq->inputs[0];
    else if (binary(*sq, "Mul") && sq->inputs[0] == sq->inputs[1])
      x = sq->inputs[0];
    else
      return std::nullopt;
    const std::optional<TensorSpec> xs = spec_of(g_, x);
    if (!xs || xs->shape.empty() || !is_float(xs->dtype) || xs->shape.back() <= 0)
      return std::nullopt;
    const auto rank = static_cast<int64_t>(xs->shape.size());
    if (!reduces_last_axis(r, rank)) return std::nullopt;
    m.x = x;
    m.c = xs->shape.back();
    m.nodes = {static_cast<int>(sq - g_.nodes.data()), r_index};
    // Add(eps) -> Sqrt.
    const int ms = skip_noop_casts(r.outputs[0], m.nodes);
    const int add = only(ms);
    if (add < 0 || !binary(g_.nodes[add], "Add")) return std::nullopt;
    const std::optional<double> eps = scalar_constant(g_, other_input(g_.nodes[add], ms));
    if (!eps || !(*eps >= 0.0)) return std::nullopt;
    m.eps = *eps;
    m.nodes.push_back(add);
    const int sq_root = only(g_.nodes[add].outputs[0]);
    if (sq_root < 0 || g_.nodes[sq_root].op_type != "Sqrt") return std::nullopt;
    m.nodes.push_back(sq_root);
    const int s = g_.nodes[sq_root].outputs[0];
    // The normalizing node: Div(x, s), or Mul(x, 1/s).
    const int k = only(s);
    if (k < 0) return std::nullopt;
    int norm = -1;
    const Node &n = g_.nodes[k];
    if (binary(n, "Div") && n.inputs[1] == s && n.inputs[0] == x) {
      norm = k;
      m.pattern = "decomposed RMSNorm (Div by Sqrt)";
    } else {
      int inv = -1;
      if (n.op_type == "Reciprocal" && n.inputs.size() == 1) {
        inv = n.outputs[0];
        m.pattern = "decomposed RMSNorm (Mul by Reciprocal of Sqrt)";
      } else if (binary(n, "Div") && n.inputs[1] == s &&
                 scalar_constant(g_, n.inputs[0]) == std::optional<double>(1.0)) {
        inv = n.outputs[0];
        m.pattern = "decomposed RMSNorm (Mul by 1 / Sqrt)";
      } else {
        return std::nullopt;
      }
      m.nodes.push_back(k);
      inv = skip_noop_casts(inv, m.nodes);
      norm = only(inv);
      if (norm < 0 || !binary(g_.nodes[norm], "Mul") || other_input(g_.nodes[norm], inv) != x)
        return std::nullopt;
    }
    m.nodes.push_back(norm);
    int cur = skip_noop_casts(g_.nodes[norm].outputs[0], m.nodes);
    const std::optional<TensorSpec> ys = spec_of(g_, cur);
    if (!ys || ys->shape != xs->shape || ys->dtype != xs->dtype) return std::nullopt;
    // Optional Mul(gamma).
    if (const int gm = only(cur); gm >= 0 && binary(g_.nodes[gm], "Mul")) {
      const int p = other_input(g_.nodes[gm], cur);
      const HostTensor &t = p >= 0 ? g_.values[p].constant : HostTensor{};
      const std::optional<TensorSpec> os = spec_of(g_, g_.nodes[gm].outputs[0]);
      if (t.defined() && t.dtype == xs->dtype && t.numel() == m.c && !t.shape.empty() &&
          t.shape.back() == m.c && static_cast<int64_t>(t.shape.size()) <= rank && os &&
          os->shape == xs->shape) {
        m.gamma = p;
        m.nodes.push_back(gm);
        cur = g_.nodes[gm].outputs[0];
        m.pattern += " with gamma";
      }
    }
    m.out = cur;
    return m;
  }

 private:
  // ReduceMean over exactly the last axis of a rank-`rank` input.
  bool reduces_last_axis(const Node &r, int64_t rank) const {
    std::vector<int64_t> axes;
    if (r.inputs.size() > 1 && r.inputs[1] >= 0) {
      const HostTensor &c = g_.values[r.inputs[1]].constant;
      if (!c.defined()) return false;
      axes = c.to_ints();
    } else if (r.has("axes")) {
      axes = r.attr_ints("axes");
    }
    return axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1);
  }

  const Graph &g_;
  const Consumers &cons_;
};

}  // namespace

int fuse_rmsnorm_patterns(Graph &g, const ExecutionProvider &provider,
                          std::vector<std::string> &decisions) {
  const Consumers cons = consumers(g);
  const Matcher matcher(g, cons);
  std::vector<char> taken(g.nodes.size(), 0);
  int fused = 0;
  const std::size_t count = g.nodes.size();
  for (std::size_t k = 0; k < count; ++k) {
    if (taken[k] || g.nodes[k].op_type != "ReduceMean") continue;
    std::optional<RmsMatch> m = matcher.match(static_cast<int>(k));
    if (!m || std::any_of(m->nodes.begin(), m->nodes.end(), [&](int i) { return taken[i]; }))
      continue;
    const TensorSpec xs = *spec_of(g, m->x);
    Candidate c;
    c.node.name = unique_node_name(
        g, g.nodes[k].name.empty() ? std::string("rmsnorm") : g.nodes[k].name + "_rmsnorm");
    c.node.op_type = "RMSNormalization";
    c.node.attrs["axis"] = Attr::of_int(-1);
    c.node.attrs["epsilon"] = Attr::of_float(m->eps);
    c.node.attrs["stash_type"] = Attr::of_int(1);
    c.inputs = {xs, TensorSpec{xs.dtype, {m->c}, {}}};
    c.outputs = {xs};
    c.pattern = m->pattern;
    if (!kernel_runs(c, provider, decisions)) continue;
    Node rn = std::move(c.node);
    int gamma = m->gamma;
    if (gamma < 0) {
      gamma = ones_constant(g, xs.dtype, m->c, rn.name + "_scale");
    } else if (g.values[gamma].constant.shape != Shape{m->c}) {
      const HostTensor &t = g.values[gamma].constant;
      const int nv = new_value(g, rn.name + "_scale", t.dtype, {m->c});
      g.values[nv].constant = HostTensor::wrap(t.dtype, {m->c}, t.data, t.holder);
      gamma = nv;
    }
    rn.inputs = {m->x, gamma};
    rn.outputs = {m->out};
    for (int i : m->nodes) {
      taken[i] = 1;
      g.nodes[i].op_type.clear();
    }
    g.nodes.push_back(std::move(rn));
    ++fused;
  }
  compact(g);
  return fused;
}

}  // namespace xpuruntime::graph::passes
