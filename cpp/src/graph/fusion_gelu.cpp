// The decomposed GELU -> one Gelu node. torch exports F.gelu below opset 20 and the
// transformers activations (GELUActivation, NewGELUActivation / gelu_new) as
//
//   erf:   core = Erf(Div(x, sqrt(2)) | Mul(x, 1/sqrt(2)))
//   tanh:  core = Tanh(Mul(sqrt(2/pi), Add(x, Mul(0.044715, Pow(x, 3) | x*x*x))))
//   y = Mul(Mul(x, Add(core, 1)), 0.5) | Mul(Mul(x, 0.5), Add(core, 1))
//     | Mul(x, Mul(Add(core, 1), 0.5))                     (operands in either order)
//
// As one node the activation is a single pass (a rational erf instead of five
// elementwise steps) and, more important, the epilogue fusion that runs next folds
// it into the MatMul+bias before it (a GEMM post-op on oneDNN, a pass over the tile
// still in cache on cpu_blas), as ONNX Runtime's BiasGelu fusion does. The match is
// exact or nothing: every intermediate read once, inside the pattern, and not a graph
// output. Constants compare with a relative tolerance of 4e-3 so the fp16/bf16 forms
// the precision pass wrote (sqrt(2) is 1.4140625 in either) still match.
#include <cmath>
#include <optional>

#include "graph/fusion_patterns.h"

namespace xpuruntime::graph::passes {
namespace {

using namespace patterns;

struct GeluMatch {
  int x = -1, out = -1;
  bool tanh = false;
  std::vector<int> nodes;  // the pattern's nodes, removed when it is fused
};

class Matcher {
 public:
  Matcher(const Graph& g, const Consumers& cons) : g_(g), cons_(cons) {}

  std::optional<GeluMatch> match(int core_index) {
    m_ = GeluMatch{};
    const Node& core = g_.nodes[core_index];
    if (core.inputs.size() != 1 || core.outputs.size() != 1) return std::nullopt;
    m_.tanh = core.op_type == "Tanh";
    if (!(m_.tanh ? match_tanh_argument(core.inputs[0]) : match_erf_argument(core.inputs[0])))
      return std::nullopt;
    m_.nodes.push_back(core_index);
    // Add(core, 1)
    int one_plus = -1;
    if (!binary_with_constant(core.outputs[0], "Add", 1.0, one_plus)) return std::nullopt;
    if (!match_tail(g_.nodes[one_plus].outputs[0])) return std::nullopt;
    return m_;
  }

 private:
  // The node reading v, when v is read once by a binary `op` (nothing else).
  int sole_binary_consumer(int v, const char* op) const {
    if (!single_use(g_, cons_, v)) return -1;
    const int c = cons_[v][0];
    const Node& n = g_.nodes[c];
    return n.op_type == op && n.inputs.size() == 2 && n.outputs.size() == 1 ? c : -1;
  }

  static int other(const Node& n, int v) { return n.inputs[0] == v ? n.inputs[1] : n.inputs[0]; }

  static bool near(std::optional<double> c, double want) {
    return c && std::abs(*c - want) <= 4e-3 * std::abs(want);
  }

  // v's only reader is `op`(v, c) or `op`(c, v) with c ≈ want; that node in `node`.
  bool binary_with_constant(int v, const char* op, double want, int& node) {
    node = sole_binary_consumer(v, op);
    if (node < 0 || !near(scalar_constant(g_, other(g_.nodes[node], v)), want)) return false;
    m_.nodes.push_back(node);
    return true;
  }

  // A producer of v that is read only by the pattern: single use, a binary op.
  const Node* owned_producer(int v, const char* op, int& index) const {
    if (!single_use(g_, cons_, v)) return nullptr;
    const Node* p = producer(g_, v);
    if (p == nullptr || p->op_type != op || p->inputs.size() != 2) return nullptr;
    index = static_cast<int>(p - g_.nodes.data());
    return p;
  }

  // Div(x, sqrt(2)) or Mul(x, 1/sqrt(2)) (either order) produces v.
  bool match_erf_argument(int v) {
    int i = -1;
    if (const Node* d = owned_producer(v, "Div", i)) {
      if (!near(scalar_constant(g_, d->inputs[1]), std::sqrt(2.0))) return false;
      m_.x = d->inputs[0];
    } else if (const Node* mul = owned_producer(v, "Mul", i)) {
      const int x = scalar_constant(g_, mul->inputs[1]) ? mul->inputs[0] : mul->inputs[1];
      if (!near(scalar_constant(g_, other(*mul, x)), std::sqrt(0.5))) return false;
      m_.x = x;
    } else {
      return false;
    }
    m_.nodes.push_back(i);
    return true;
  }

  // Mul(sqrt(2/pi), Add(x, Mul(0.044715, cube(x)))) produces v, operands in any order.
  bool match_tanh_argument(int v) {
    int scale_i = -1, add_i = -1, coef_i = -1;
    const Node* scale = owned_producer(v, "Mul", scale_i);
    if (scale == nullptr) return false;
    const int inner = scalar_constant(g_, scale->inputs[1]) ? scale->inputs[0] : scale->inputs[1];
    if (!near(scalar_constant(g_, other(*scale, inner)), std::sqrt(2.0 / M_PI))) return false;
    const Node* add = owned_producer(inner, "Add", add_i);
    if (add == nullptr) return false;
    // One Add operand is x, the other 0.044715·x³; try both assignments.
    for (int side = 0; side < 2; ++side) {
      const int x = add->inputs[side], term = add->inputs[1 - side];
      const Node* coef = owned_producer(term, "Mul", coef_i);
      if (coef == nullptr) continue;
      const int cube = scalar_constant(g_, coef->inputs[1]) ? coef->inputs[0] : coef->inputs[1];
      if (!near(scalar_constant(g_, other(*coef, cube)), 0.044715)) continue;
      std::vector<int> cube_nodes;
      if (!match_cube(cube, x, cube_nodes)) continue;
      m_.x = x;
      m_.nodes.insert(m_.nodes.end(), {scale_i, add_i, coef_i});
      m_.nodes.insert(m_.nodes.end(), cube_nodes.begin(), cube_nodes.end());
      return true;
    }
    return false;
  }

  // v = Pow(x, 3), Mul(Mul(x, x), x) or Mul(x, Mul(x, x)).
  bool match_cube(int v, int x, std::vector<int>& nodes) const {
    int i = -1;
    if (const Node* p = owned_producer(v, "Pow", i)) {
      if (p->inputs[0] != x || !near(scalar_constant(g_, p->inputs[1]), 3.0)) return false;
      nodes.push_back(i);
      return true;
    }
    const Node* m = owned_producer(v, "Mul", i);
    if (m == nullptr) return false;
    const int sq = m->inputs[0] == x ? m->inputs[1] : m->inputs[0];
    if (other(*m, sq) != x) return false;
    int j = -1;
    const Node* s = owned_producer(sq, "Mul", j);
    if (s == nullptr || s->inputs[0] != x || s->inputs[1] != x) return false;
    nodes.insert(nodes.end(), {i, j});
    return true;
  }

  // p = Add(core, 1) is multiplied by x and by 0.5 in one of the three orders.
  bool match_tail(int p) {
    const int m1 = sole_binary_consumer(p, "Mul");
    if (m1 < 0) return false;
    const Node& n1 = g_.nodes[m1];
    const int q = other(n1, p);
    if (q == m_.x) {  // Mul(x, p) then Mul(·, 0.5)
      m_.nodes.push_back(m1);
      int last = -1;
      if (!binary_with_constant(n1.outputs[0], "Mul", 0.5, last)) return false;
      m_.out = g_.nodes[last].outputs[0];
      return true;
    }
    if (near(scalar_constant(g_, q), 0.5)) {  // Mul(p, 0.5) then Mul(x, ·)
      m_.nodes.push_back(m1);
      const int m2 = sole_binary_consumer(n1.outputs[0], "Mul");
      if (m2 < 0 || other(g_.nodes[m2], n1.outputs[0]) != m_.x) return false;
      m_.nodes.push_back(m2);
      m_.out = g_.nodes[m2].outputs[0];
      return true;
    }
    // Mul(h, p) with h = Mul(x, 0.5) read only here.
    int h = -1;
    const Node* half = owned_producer(q, "Mul", h);
    if (half == nullptr) return false;
    const int hx = half->inputs[0] == m_.x ? half->inputs[1] : half->inputs[0];
    if (other(*half, hx) != m_.x || !near(scalar_constant(g_, hx), 0.5)) return false;
    m_.nodes.insert(m_.nodes.end(), {h, m1});
    m_.out = n1.outputs[0];
    return true;
  }

  const Graph& g_;
  const Consumers& cons_;
  GeluMatch m_;
};

}  // namespace

int fuse_gelu_patterns(Graph& g, const ExecutionProvider& provider,
                       std::vector<std::string>& decisions) {
  const Consumers cons = consumers(g);
  std::vector<char> taken(g.nodes.size(), 0);
  Matcher matcher(g, cons);
  int fused = 0;
  const std::size_t count = g.nodes.size();
  for (std::size_t k = 0; k < count; ++k) {
    const std::string& op = g.nodes[k].op_type;
    if (taken[k] || (op != "Erf" && op != "Tanh")) continue;
    std::optional<GeluMatch> m = matcher.match(static_cast<int>(k));
    if (!m || std::any_of(m->nodes.begin(), m->nodes.end(), [&](int i) { return taken[i]; }))
      continue;
    const std::optional<TensorSpec> xs = spec_of(g, m->x), ys = spec_of(g, m->out);
    // A one-element constant of higher rank than x broadcasts x up ([N] * [[0.5]] is
    // [1, N]): the pattern is GELU only where the result keeps x's shape.
    if (!xs || !ys || !is_float(xs->dtype) || ys->shape != xs->shape || ys->dtype != xs->dtype)
      continue;
    Candidate c;
    c.node.name = unique_node_name(
        g, g.nodes[k].name.empty() ? std::string("gelu") : g.nodes[k].name + "_gelu");
    c.node.op_type = "Gelu";
    c.node.attrs["approximate"] = Attr::of_string(m->tanh ? "tanh" : "none");
    c.inputs = {*xs};
    c.outputs = {*xs};
    c.pattern = m->tanh ? "tanh-approximated GELU (Pow/Mul, Mul, Add, Mul, Tanh, Add, Mul, Mul)"
                        : "erf GELU (Div or Mul, Erf, Add, Mul, Mul)";
    if (!kernel_runs(c, provider, decisions)) continue;
    Node gelu = std::move(c.node);
    gelu.inputs = {m->x};
    gelu.outputs = {m->out};
    for (int i : m->nodes) {
      taken[i] = 1;
      g.nodes[i].op_type.clear();
    }
    g.nodes.push_back(std::move(gelu));
    ++fused;
  }
  compact(g);
  return fused;
}

}  // namespace xpuruntime::graph::passes
