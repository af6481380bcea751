// Nodes that leave their input as it is, removed (their readers read the input; one
// that yields a graph output becomes Identity, a view: nothing runs).
// Exports write them where a shape only happens to need nothing: torchvision's Swin
// pads every window partition by (window - size % window) % window, which is 0 at
// 224x224, and each such Pad copied a whole activation (15 copies, 0.66 ms of a
// 5.8 ms run on an H200). Rewritten, with shapes known:
//
//   Pad(x, pads all 0)                       (constant pads input or attribute)
//   Transpose(x, perm = identity)
//   Expand(x, shape) with output shape == x's shape
//   Slice(x, ...) with output shape == x's shape and every step 1
//   Cast(x, to = x's dtype)
//   Concat(x) with one input
//
// The node's other inputs lose a reader (dead-code elimination drops constants nobody
// reads).
//
// Also here, the other rewrite of data movement into nothing: a Transpose -> Reshape
// -> Transpose chain whose composite keeps every element in place becomes one Reshape
// (fold_transpose_reshape_transpose, run after the channels-last pass adds its own
// Transposes: PVT views its tokens [B, H*W, C] as an image [B, C, H, W] around each
// convolution, which in NHWC is the tokens themselves); and a Transpose that moves only
// dims of size 1 becomes a Reshape (unit_dim_transposes_as_views: PVT's one-head
// attention transposes [B, N, 1, D] to [B, 1, N, D] and back, 4 copies of 6 MB a run).
#include <algorithm>
#include <optional>
#include <vector>

#include "graph/fusion_patterns.h"
#include "graph/passes.h"

namespace xpuruntime::graph::passes {
namespace {

using patterns::is_float;

// All elements of constant value v (integer or float) equal `want`.
bool constant_all(const Graph& g, int v, int64_t want) {
  if (v < 0) return false;
  const HostTensor& c = g.values[v].constant;
  if (!c.defined()) return false;
  for (int64_t i = 0; i < c.numel(); ++i) {
    const double x = is_float(c.dtype) ? c.float_at(i) : static_cast<double>(c.int_at(i));
    if (x != static_cast<double>(want)) return false;
  }
  return true;
}

bool same_spec(const Graph& g, int a, int b) {
  const Value &va = g.values[a], &vb = g.values[b];
  return va.shape && vb.shape && *va.shape == *vb.shape && va.dtype == vb.dtype;
}

bool is_noop(const Graph& g, const Node& n) {
  if (n.inputs.empty() || n.inputs[0] < 0 || n.outputs.size() != 1 || n.outputs[0] < 0)
    return false;
  const int x = n.inputs[0], y = n.outputs[0];
  if (!same_spec(g, x, y)) return false;
  const std::string& op = n.op_type;
  if (op == "Pad") {
    if (n.inputs.size() > 1 && n.inputs[1] >= 0) return constant_all(g, n.inputs[1], 0);
    const std::vector<int64_t> pads = n.attr_ints("pads");
    return std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; });
  }
  if (op == "Transpose") {
    const std::vector<int64_t> perm = n.attr_ints("perm");
    for (std::size_t i = 0; i < perm.size(); ++i)
      if (perm[i] != static_cast<int64_t>(i)) return false;
    return !perm.empty() || g.values[x].shape->size() <= 1;
  }
  if (op == "Expand" || op == "Cast") return true;  // same shape and dtype in and out
  if (op == "Slice")
    return n.inputs.size() < 5 || n.inputs[4] < 0 || constant_all(g, n.inputs[4], 1);
  if (op == "Concat") return n.inputs.size() == 1;
  return false;
}

}  // namespace

int eliminate_noops(Graph& g) {
  int removed = 0;
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    Node& n = g.nodes[k];
    if (n.op_type.empty() || !is_noop(g, n)) continue;
    const int x = n.inputs[0], y = n.outputs[0];
    if (patterns::is_output(g, y)) {
      // A graph output keeps its name: the node stays, as a view.
      n.op_type = "Identity";
      n.domain.clear();
      n.attrs.clear();
      n.inputs.resize(1);
    } else {
      // Readers take the input itself, so later pattern matching sees no extra node.
      for (Node& c : g.nodes)
        for (int& i : c.inputs)
          if (i == y) i = x;
      n.op_type.clear();
    }
    ++removed;
  }
  compact(g);
  return removed;
}

}  // namespace xpuruntime::graph::passes

namespace xpuruntime::graph::passes {
namespace {

// One factor of a tensor's dims in the common refinement of a Reshape's input and
// output shapes: which input dim and which output dim it belongs to.
struct Atom {
  int64_t size;
  int in_dim, out_dim;
};

// The common refinement of `in` and `out` (same element count), size-1 dims dropped;
// nullopt when a dim of one does not split cleanly along the other's (e.g. [4, 6] ->
// [6, 4]).
std::optional<std::vector<Atom>> refine(const Shape& in, const Shape& out) {
  std::vector<Atom> atoms;
  std::size_t i = 0, j = 0;
  int64_t ri = 0, rj = 0;
  while (true) {
    while (ri <= 1 && i < in.size()) ri = in[i++];
    while (rj <= 1 && j < out.size()) rj = out[j++];
    if (ri <= 1 || rj <= 1) return ri <= 1 && rj <= 1 ? std::optional(atoms) : std::nullopt;
    const int64_t a = std::min(ri, rj);
    if (std::max(ri, rj) % a != 0) return std::nullopt;
    atoms.push_back({a, static_cast<int>(i) - 1, static_cast<int>(j) - 1});
    ri /= a;
    rj /= a;
  }
}

std::vector<int64_t> perm_of(const Node& t, std::size_t rank) {
  std::vector<int64_t> p = t.attr_ints("perm");
  if (p.empty())
    for (std::size_t d = rank; d-- > 0;) p.push_back(static_cast<int64_t>(d));
  return p;
}

// Node k (one output, its shape known) becomes Reshape(x, that shape as a constant): a
// view of x.
void rewrite_as_view(Graph& g, std::size_t k, int x) {
  const Value& yv = g.values[g.nodes[k].outputs[0]];
  HostTensor shape = HostTensor::alloc(DType::kInt64, {static_cast<int64_t>(yv.shape->size())});
  std::copy(yv.shape->begin(), yv.shape->end(), shape.ptr<int64_t>());
  const int sv = g.value_id(fresh_name(g, yv.name + "_view_shape"));
  g.values[sv].constant = shape;
  g.values[sv].dtype = DType::kInt64;
  g.values[sv].dtype_known = true;
  g.values[sv].shape = shape.shape;
  Node& n = g.nodes[k];
  n.op_type = "Reshape";
  n.attrs.clear();
  n.inputs = {x, sv};
}

}  // namespace

int fold_transpose_reshape_transpose(Graph& g) {
  int folded = 0;
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& t2 = g.nodes[k];
    if (t2.op_type != "Transpose" || !t2.domain.empty() || t2.inputs.empty() ||
        t2.outputs.size() != 1)
      continue;
    const Node* r = patterns::producer(g, t2.inputs[0]);
    if (!r || r->op_type != "Reshape" || r->inputs.empty()) continue;
    const Node* t1 = patterns::producer(g, r->inputs[0]);
    if (!t1 || t1->op_type != "Transpose" || !t1->domain.empty() || t1->inputs.empty()) continue;
    const int x = t1->inputs[0], y = t2.outputs[0];
    const Value &xv = g.values[x], &s1v = g.values[r->inputs[0]], &s2v = g.values[t2.inputs[0]],
                &yv = g.values[y];
    if (!xv.shape || !s1v.shape || !s2v.shape || !yv.shape) continue;
    const std::vector<int64_t> p1 = perm_of(*t1, xv.shape->size()),
                               p2 = perm_of(t2, s2v.shape->size());
    const std::optional<std::vector<Atom>> atoms = refine(*s1v.shape, *s2v.shape);
    if (!atoms || p1.size() != s1v.shape->size() || p2.size() != s2v.shape->size()) continue;
    // x's memory order of the atoms: x's dims in order, each as the atoms of the
    // Reshape input dim it became (a Transpose keeps a dim's inside order).
    std::vector<int> x_order, y_order;
    for (std::size_t xd = 0; xd < p1.size(); ++xd)
      for (std::size_t a = 0; a < atoms->size(); ++a)
        if (p1[static_cast<std::size_t>((*atoms)[a].in_dim)] == static_cast<int64_t>(xd))
          x_order.push_back(static_cast<int>(a));
    // y's: its dims in order, each the atoms of the Reshape output dim p2 put there.
    for (int64_t od : p2)
      for (std::size_t a = 0; a < atoms->size(); ++a)
        if ((*atoms)[a].out_dim == od) y_order.push_back(static_cast<int>(a));
    if (x_order != y_order) continue;
    // The chain moves nothing: y = Reshape(x); t2 rewritten in place (t1 and r lose a
    // reader).
    rewrite_as_view(g, k, x);
    ++folded;
  }
  return folded;
}

int unit_dim_transposes_as_views(Graph& g) {
  int made = 0;
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (n.op_type != "Transpose" || !n.domain.empty() || n.inputs.empty() || n.inputs[0] < 0 ||
        n.outputs.size() != 1 || n.outputs[0] < 0)
      continue;
    const Value &xv = g.values[n.inputs[0]], &yv = g.values[n.outputs[0]];
    if (!xv.shape || !yv.shape) continue;
    const Shape& in = *xv.shape;
    const std::vector<int64_t> perm = perm_of(n, in.size());
    if (perm.size() != in.size()) continue;
    // The input dims of size above 1 in the order the output holds them: ascending
    // means every element keeps its place (a head axis of size 1 moved, say).
    int64_t last = -1;
    bool in_place = true;
    for (int64_t d : perm) {
      if (d < 0 || d >= static_cast<int64_t>(in.size())) {
        in_place = false;
        break;
      }
      if (in[static_cast<std::size_t>(d)] == 1) continue;
      in_place = in_place && d > last;
      last = d;
    }
    if (!in_place) continue;
    rewrite_as_view(g, k, n.inputs[0]);
    ++made;
  }
  return made;
}

}  // namespace xpuruntime::graph::passes
