// The decomposed LayerNorm -> one LayerNormalization node. torch exports
// nn.LayerNorm this way below opset 17, and many hand-written models compute it so:
//
//   mean = ReduceMean(x, [-1]);  d = Sub(x, mean)            (one Sub, or one per use)
//   var  = ReduceMean(Pow(d, 2) | Mul(d, d), [-1])
//   y    = Div(d, Sqrt(Add(var, eps)))  |  Mul(d, Reciprocal(Sqrt(Add(var, eps))))
//   y    = Add(Mul(y, gamma), beta)                          (each optional)
//
// The match is exact or nothing: both means over the last axis only with keepdims,
// eps and the exponent constant scalars, gamma/beta constants of [C] elements (C the
// last dimension), and no intermediate read outside the pattern or a graph output
// (then the intermediate must exist, and the subgraph stays). Statistics are float32
// (stash_type 1), as the decomposed form computes them for float32 inputs.
#include <algorithm>
#include <cstring>
#include <optional>

#include "graph/fusion_patterns.h"
#include "xpuruntime/ops/nn.h"

namespace xpuruntime::graph::passes {
namespace {

using namespace patterns;

// ReduceMean over exactly the last axis of a rank-`rank` input, keeping dims.
bool reduces_last_axis(const Graph& g, const Node& r, int64_t rank) {
  if (r.op_type != "ReduceMean" || r.attr_int("keepdims", 1) != 1) return false;
  std::vector<int64_t> axes;
  if (r.inputs.size() > 1 && r.inputs[1] >= 0) {
    const HostTensor& c = g.values[r.inputs[1]].constant;
    if (!c.defined()) return false;
    axes = c.to_ints();
  } else if (r.has("axes")) {
    axes = r.attr_ints("axes");
  }
  return axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1);
}

int only_consumer(const Graph& g, const Consumers& cons, int v) {
  return single_use(g, cons, v) ? cons[v][0] : -1;
}

int other_input(const Node& n, int v) { return n.inputs[0] == v ? n.inputs[1] : n.inputs[0]; }

bool binary(const Node& n, const char* op) { return n.op_type == op && n.inputs.size() == 2; }

// A constant gamma/beta: x's dtype, C elements along the last axis (leading dims 1).
bool affine_constant(const Graph& g, int v, DType dt, int64_t c, std::size_t rank) {
  if (v < 0) return false;
  const HostTensor& t = g.values[v].constant;
  return t.defined() && t.dtype == dt && t.numel() == c && !t.shape.empty() &&
         t.shape.back() == c && t.shape.size() <= rank;
}

struct LnMatch {
  int x = -1, out = -1;
  int64_t c = 0;
  double eps = 0;
  int gamma = -1, beta = -1;
  std::vector<int> nodes;  // the pattern's nodes, removed when it is fused
  std::string pattern;
};

std::optional<LnMatch> match(const Graph& g, const Consumers& cons, int r1_index) {
  const Node& r1 = g.nodes[r1_index];
  const int x = r1.inputs.empty() ? -1 : r1.inputs[0];
  const std::optional<TensorSpec> xs = spec_of(g, x);
  if (!xs || xs->shape.empty() || !is_float(xs->dtype) || r1.outputs.empty()) return std::nullopt;
  const std::size_t rank = xs->shape.size();
  if (!reduces_last_axis(g, r1, static_cast<int64_t>(rank))) return std::nullopt;
  LnMatch m;
  m.x = x;
  m.c = xs->shape.back();
  m.nodes = {r1_index};
  const int mean = r1.outputs[0];
  if (mean < 0 || is_output(g, mean) || cons[mean].empty() || cons[mean].size() > 2)
    return std::nullopt;
  std::vector<int> diffs;  // the Sub(x, mean) outputs
  for (int k : cons[mean]) {
    const Node& s = g.nodes[k];
    if (!binary(s, "Sub") || s.inputs[0] != x || s.inputs[1] != mean || is_output(g, s.outputs[0]))
      return std::nullopt;
    diffs.push_back(s.outputs[0]);
    m.nodes.push_back(k);
  }
  // The differences feed exactly one squaring node and one normalizing node.
  int sq = -1, norm = -1, d_norm = -1, readers = 0;
  for (int d : diffs) {
    for (int k : cons[d]) {
      ++readers;
      const Node& n = g.nodes[k];
      const bool square = (binary(n, "Pow") && n.inputs[0] == d &&
                           scalar_constant(g, n.inputs[1]) == std::optional<double>(2.0)) ||
                          (binary(n, "Mul") && n.inputs[0] == d && n.inputs[1] == d);
      const bool divides = (binary(n, "Div") && n.inputs[0] == d && n.inputs[1] != d) ||
                           (binary(n, "Mul") && (n.inputs[0] == d) != (n.inputs[1] == d));
      if (square && sq < 0) {
        sq = k;
      } else if (divides && norm < 0) {
        norm = k;
        d_norm = d;
      } else {
        return std::nullopt;
      }
    }
  }
  if (sq < 0 || norm < 0 || readers != 2) return std::nullopt;
  m.nodes.push_back(sq);
  // var = ReduceMean(square); std = Sqrt(var + eps)
  const int r2 = only_consumer(g, cons, g.nodes[sq].outputs[0]);
  if (r2 < 0 || !reduces_last_axis(g, g.nodes[r2], static_cast<int64_t>(rank)) ||
      g.nodes[r2].inputs[0] != g.nodes[sq].outputs[0])
    return std::nullopt;
  m.nodes.push_back(r2);
  const int var = g.nodes[r2].outputs[0];
  const int add = only_consumer(g, cons, var);
  if (add < 0 || !binary(g.nodes[add], "Add")) return std::nullopt;
  const std::optional<double> eps = scalar_constant(g, other_input(g.nodes[add], var));
  if (!eps || !(*eps >= 0.0)) return std::nullopt;
  m.eps = *eps;
  m.nodes.push_back(add);
  const int sqrt_node = only_consumer(g, cons, g.nodes[add].outputs[0]);
  if (sqrt_node < 0 || g.nodes[sqrt_node].op_type != "Sqrt") return std::nullopt;
  m.nodes.push_back(sqrt_node);
  const int stdv = g.nodes[sqrt_node].outputs[0];
  const Node& nn = g.nodes[norm];
  if (nn.op_type == "Div") {
    if (nn.inputs[1] != stdv || only_consumer(g, cons, stdv) != norm) return std::nullopt;
    m.pattern = "decomposed LayerNorm (Div by Sqrt)";
  } else {  // Mul(d, Reciprocal(std))
    const int inv = other_input(nn, d_norm);
    const int rec = only_consumer(g, cons, stdv);
    if (rec < 0 || g.nodes[rec].op_type != "Reciprocal" || g.nodes[rec].outputs[0] != inv ||
        only_consumer(g, cons, inv) != norm)
      return std::nullopt;
    m.nodes.push_back(rec);
    m.pattern = "decomposed LayerNorm (Mul by Reciprocal of Sqrt)";
  }
  m.nodes.push_back(norm);
  int cur = nn.outputs[0];
  const std::optional<TensorSpec> ys = spec_of(g, cur);
  if (!ys || ys->shape != xs->shape || ys->dtype != xs->dtype) return std::nullopt;
  // Optional Mul(gamma), then optional Add(beta), each keeping x's shape.
  auto absorb = [&](const char* op, int& param) {
    const int k = only_consumer(g, cons, cur);
    if (k < 0 || !binary(g.nodes[k], op)) return;
    const int p = other_input(g.nodes[k], cur);
    const std::optional<TensorSpec> os = spec_of(g, g.nodes[k].outputs[0]);
    if (!affine_constant(g, p, xs->dtype, m.c, rank) || !os || os->shape != xs->shape) return;
    param = p;
    m.nodes.push_back(k);
    cur = g.nodes[k].outputs[0];
  };
  absorb("Mul", m.gamma);
  if (m.gamma >= 0) absorb("Add", m.beta);
  if (m.gamma >= 0) m.pattern += m.beta >= 0 ? " with gamma and beta" : " with gamma";
  m.out = cur;
  return m;
}

// gamma/beta as a [C] constant value (the constant itself when it is [C] already).
int vector_constant(Graph& g, int v, int64_t c, const std::string& prefix) {
  if (g.values[v].constant.shape == Shape{c}) return v;
  const HostTensor& t = g.values[v].constant;
  const int nv = new_value(g, prefix, t.dtype, {c});
  g.values[nv].constant = HostTensor::wrap(t.dtype, {c}, t.data, t.holder);
  return nv;
}

}  // namespace

int fuse_layernorm_patterns(Graph& g, const ExecutionProvider& provider,
                            std::vector<std::string>& decisions) {
  const Consumers cons = consumers(g);
  std::vector<char> taken(g.nodes.size(), 0);
  int fused = 0;
  const std::size_t count = g.nodes.size();
  for (std::size_t k = 0; k < count; ++k) {
    if (taken[k] || g.nodes[k].op_type != "ReduceMean") continue;
    std::optional<LnMatch> m = match(g, cons, static_cast<int>(k));
    if (!m || std::any_of(m->nodes.begin(), m->nodes.end(), [&](int i) { return taken[i]; }))
      continue;
    const TensorSpec xs = *spec_of(g, m->x);
    Candidate c;
    c.node.name = unique_node_name(
        g, g.nodes[k].name.empty() ? std::string("layernorm") : g.nodes[k].name + "_layernorm");
    c.node.op_type = "LayerNormalization";
    c.node.attrs["axis"] = Attr::of_int(-1);
    c.node.attrs["epsilon"] = Attr::of_float(m->eps);
    c.node.attrs["stash_type"] = Attr::of_int(1);
    c.inputs = {xs, TensorSpec{xs.dtype, {m->c}, {}}};
    if (m->beta >= 0) c.inputs.push_back(TensorSpec{xs.dtype, {m->c}, {}});
    c.outputs = {xs};
    c.pattern = m->pattern;
    if (!kernel_runs(c, provider, decisions)) continue;
    Node ln = std::move(c.node);
    const int gamma = m->gamma >= 0 ? vector_constant(g, m->gamma, m->c, ln.name + "_scale")
                                    : ones_constant(g, xs.dtype, m->c, ln.name + "_scale");
    ln.inputs = {m->x, gamma};
    if (m->beta >= 0) ln.inputs.push_back(vector_constant(g, m->beta, m->c, ln.name + "_bias"));
    ln.outputs = {m->out};
    for (int i : m->nodes) {
      taken[i] = 1;
      g.nodes[i].op_type.clear();
    }
    g.nodes.push_back(std::move(ln));
    ++fused;
  }
  compact(g);
  return fused;
}

}  // namespace xpuruntime::graph::passes
