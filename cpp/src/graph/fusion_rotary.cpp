// The rotary position embedding of GPT-NeoX / Llama / Qwen / Mistral exports ->
// one RotaryHalf node (domain xrt):
//
//   x1  = Slice(x, 0, d/2, axis -1);  x2 = Slice(x, d/2, end, axis -1)
//   rot = Concat(Neg(x2), x1, axis -1)
//   y   = Add(Mul(x, cos), Mul(rot, sin))          (either operand order
//   anywhere)
//
// Exact or nothing: both Slices of the same x along its last axis with unit
// steps and the halves' bounds, the Concat, Neg and both Muls read only inside
// the pattern, cos and sin of x's dtype with x's last dimension, broadcasting
// to x (a [S, d] table or [B, 1, S, d]), and every product of x's shape. Runs
// after precision lowering, on the dtype x has in the plan.
#include <algorithm>
#include <limits>
#include <optional>

#include "graph/fusion_patterns.h"
#include "xpuruntime/ops/op_schema.h"

namespace xpuruntime::graph::passes {
namespace {

using namespace patterns;

int other_input(const Node &n, int v) { return n.inputs[0] == v ? n.inputs[1] : n.inputs[0]; }

// Constant integer input i of node n (or the attribute of the same name for
// opset < 10 Slices), empty when absent; nullopt when not constant.
std::optional<std::vector<int64_t>> ints_of(const Graph &g, const Node &n, std::size_t i,
                                            const char *attr) {
  if (i < n.inputs.size() && n.inputs[i] >= 0) {
    const HostTensor &c = g.values[n.inputs[i]].constant;
    if (!c.defined()) return std::nullopt;
    return c.to_ints();
  }
  if (n.has(attr)) return n.attr_ints(attr);
  return std::vector<int64_t>{};
}

// n = Slice(x) of x's last axis (rank `rank`, size d) with unit step: its
// [begin, end).
std::optional<std::pair<int64_t, int64_t>> last_axis_slice(const Graph &g, const Node &n,
                                                           int64_t rank, int64_t d) {
  if (n.op_type != "Slice" || n.inputs.empty()) return std::nullopt;
  const auto starts = ints_of(g, n, 1, "starts"), ends = ints_of(g, n, 2, "ends"),
             axes = ints_of(g, n, 3, "axes"), steps = ints_of(g, n, 4, "steps");
  if (!starts || !ends || !axes || !steps || starts->size() != 1 || ends->size() != 1)
    return std::nullopt;
  const int64_t axis = axes->empty() ? 0 : (*axes)[0];
  if (axes->size() > 1 || (axis != -1 && axis != rank - 1)) return std::nullopt;
  if (!steps->empty() && (steps->size() != 1 || (*steps)[0] != 1)) return std::nullopt;
  auto clamp = [d](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + d : v, 0, d); };
  return std::make_pair(clamp((*starts)[0]), clamp((*ends)[0]));
}

struct RopeMatch {
  int x = -1, cos = -1, sin = -1, out = -1;
  std::vector<int> nodes;
};

std::optional<RopeMatch> match(const Graph &g, const Consumers &cons, int concat_index) {
  const Node &cat = g.nodes[concat_index];
  if (cat.op_type != "Concat" || cat.inputs.size() != 2 || cat.outputs.empty()) return std::nullopt;
  const Node *neg = producer(g, cat.inputs[0]);
  const Node *s1 = producer(g, cat.inputs[1]);
  if (neg == nullptr || s1 == nullptr || neg->op_type != "Neg" ||
      !single_use(g, cons, cat.inputs[0]) || !single_use(g, cons, cat.inputs[1]))
    return std::nullopt;
  const Node *s2 = producer(g, neg->inputs[0]);
  if (s2 == nullptr || !single_use(g, cons, neg->inputs[0]) || s1->inputs.empty() ||
      s2->inputs.empty() || s1->inputs[0] != s2->inputs[0])
    return std::nullopt;
  const int x = s1->inputs[0];
  const std::optional<TensorSpec> xs = spec_of(g, x);
  if (!xs || xs->shape.empty() || !is_float(xs->dtype)) return std::nullopt;
  const auto rank = static_cast<int64_t>(xs->shape.size());
  const int64_t d = xs->shape.back();
  if (d <= 0 || d % 2 != 0) return std::nullopt;
  const int64_t axis = cat.attr_int("axis", 0);
  if (axis != -1 && axis != rank - 1) return std::nullopt;
  const auto first = last_axis_slice(g, *s1, rank, d), second = last_axis_slice(g, *s2, rank, d);
  if (!first || !second || *first != std::make_pair(int64_t{0}, d / 2) ||
      *second != std::make_pair(d / 2, d))
    return std::nullopt;
  RopeMatch m;
  m.x = x;
  auto index = [&](const Node *n) { return static_cast<int>(n - g.nodes.data()); };
  m.nodes = {index(s1), index(s2), index(neg), concat_index};
  // Mul(rot, sin) -> Add(., Mul(x, cos)).
  const int rot = cat.outputs[0];
  if (!single_use(g, cons, rot)) return std::nullopt;
  const int mul_sin = cons[rot][0];
  const Node &ms = g.nodes[mul_sin];
  if (ms.op_type != "Mul" || ms.inputs.size() != 2 || !single_use(g, cons, ms.outputs[0]))
    return std::nullopt;
  m.sin = other_input(ms, rot);
  const int add_index = cons[ms.outputs[0]][0];
  const Node &add = g.nodes[add_index];
  if (add.op_type != "Add" || add.inputs.size() != 2) return std::nullopt;
  const int xc = other_input(add, ms.outputs[0]);
  const Node *mc = producer(g, xc);
  if (mc == nullptr || mc->op_type != "Mul" || mc->inputs.size() != 2 || !single_use(g, cons, xc) ||
      (mc->inputs[0] != x && mc->inputs[1] != x) || mc->inputs[0] == mc->inputs[1])
    return std::nullopt;
  m.cos = other_input(*mc, x);
  m.nodes.push_back(mul_sin);
  m.nodes.push_back(index(mc));
  m.nodes.push_back(add_index);
  m.out = add.outputs[0];
  // cos/sin: x's dtype and last dimension, broadcasting to x; every product x's
  // shape.
  for (int v : {m.cos, m.sin}) {
    const std::optional<TensorSpec> s = spec_of(g, v);
    if (!s || s->dtype != xs->dtype || s->shape.empty() || s->shape.back() != d ||
        s->shape.size() > xs->shape.size())
      return std::nullopt;
    for (std::size_t k = 0; k < s->shape.size(); ++k) {
      const int64_t a = s->shape[s->shape.size() - 1 - k], b = xs->shape[xs->shape.size() - 1 - k];
      if (a != b && a != 1) return std::nullopt;
    }
  }
  for (int v : {ms.outputs[0], xc, m.out}) {
    const std::optional<TensorSpec> s = spec_of(g, v);
    if (!s || s->shape != xs->shape) return std::nullopt;
  }
  return m;
}

}  // namespace

int fuse_rotary_patterns(Graph &g, const ExecutionProvider &provider,
                         std::vector<std::string> &decisions) {
  const Consumers cons = consumers(g);
  std::vector<char> taken(g.nodes.size(), 0);
  int fused = 0;
  const std::size_t count = g.nodes.size();
  for (std::size_t k = 0; k < count; ++k) {
    if (taken[k] || g.nodes[k].op_type != "Concat") continue;
    std::optional<RopeMatch> m = match(g, cons, static_cast<int>(k));
    if (!m || std::any_of(m->nodes.begin(), m->nodes.end(), [&](int i) { return taken[i]; }))
      continue;
    Candidate c;
    c.node.name = unique_node_name(
        g, g.nodes[k].name.empty() ? std::string("rotary") : g.nodes[k].name + "_rotary");
    c.node.op_type = "RotaryHalf";
    c.node.domain = "xrt";
    c.inputs = {*spec_of(g, m->x), *spec_of(g, m->cos), *spec_of(g, m->sin)};
    c.outputs = {*spec_of(g, m->x)};
    c.pattern = "rotary embedding (Slice, Neg, Concat, Mul, Mul, Add)";
    if (!kernel_runs(c, provider, decisions)) continue;
    Node r = std::move(c.node);
    r.inputs = {m->x, m->cos, m->sin};
    r.outputs = {m->out};
    for (int i : m->nodes) {
      taken[i] = 1;
      g.nodes[i].op_type.clear();
    }
    g.nodes.push_back(std::move(r));
    ++fused;
  }
  compact(g);
  return fused;
}

}  // namespace xpuruntime::graph::passes
