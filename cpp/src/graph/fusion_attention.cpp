// The scaled-dot-product attention subgraph -> one FusedAttention node
// (xpuruntime/ops/attention.h). What torch exports for BERT, GPT-2 and ViT, after
// constant folding:
//
//   S = MatMul(Q | Mul(Q, c), Kᵀ | Mul(Kᵀ, c))       Kᵀ usually Transpose(X, perm)
//   S = Mul(S, c) | Div(S, c)                         any number of constant scalars
//   S = Where(causal, S, fill) | Where(!causal, fill, S)   optional, constant condition
//   S = Add(S, mask)                                  optional (a constant causal 0/-big
//                                                     mask becomes is_causal instead)
//   P = Softmax(S, axis=-1) [-> Cast to its own dtype]
//   P = Where(IsNaN(P), 0, P)                         optional (torch's SDPA export):
//                                                     the node's nan_rows_zero
//   Y = MatMul(P, V)
//
// Q, Kᵀ, V rank 4 with equal batch and head dims (no broadcasting). K is handed to the
// node untransposed: Kᵀ's Transpose gets the permutation that yields K (or goes away
// when that is the identity); Kᵀ = Reshape(Transpose(Reshape(K, [B·H, S, D]))) (the
// dynamo exporter's form) hands over K itself; a Kᵀ from anything else gets a
// Transpose of its own.
// Every intermediate must be read only by the next node of the pattern and not be a
// graph output; the mask is added after the scaling (a mask scaled with the scores is
// a near-miss, left alone). A causal Where/mask counts only with as many queries as
// keys, a condition exactly lower-triangular, and a fill at or below -1e4 (it then
// gives exp(...) == 0 in every float type, as the kernels' causal masking does).
#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include "graph/fusion_patterns.h"
#include "xpuruntime/ops/attention.h"

namespace xpuruntime::graph::passes {
namespace {

using namespace patterns;

constexpr double kMaskedBelow = -1e4;  // a fill/mask value at or below this hides a key

struct AttnMatch {
  int q = -1, kt = -1, v = -1, mask = -1, out = -1;
  int kt_transpose = -1;  // the Transpose node producing Kᵀ (rewritten), or -1
  int k_direct = -1;      // K itself, when Kᵀ is Reshape(Transpose(Reshape(K))) (dropped)
  double scale = 1.0;
  bool causal = false;
  bool nan_rows_zero = false;
  std::vector<int> nodes;  // nodes the fused node replaces
  std::string pattern;
};

int only_consumer(const Graph& g, const Consumers& cons, int v) {
  return single_use(g, cons, v) ? cons[v][0] : -1;
}

bool binary(const Node& n, const char* op) { return n.op_type == op && n.inputs.size() == 2; }

// Whether the constant c, read as masked(i, j) for query i and key j over its last two
// dims (every leading slice alike), hides exactly the keys j > i of a square [s, s].
template <typename Masked>
bool causal_constant(const HostTensor& c, int64_t s, Masked masked) {
  if (c.shape.size() < 2 || c.shape[c.shape.size() - 2] != s || c.shape.back() != s) return false;
  const int64_t slices = c.numel() / (s * s);
  for (int64_t b = 0; b < slices; ++b)
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = 0; j < s; ++j)
        if (masked(b * s * s + i * s + j) != (j > i)) return false;
  return true;
}

// An additive mask constant that is 0 on and below the diagonal and <= -1e4 above.
bool causal_additive(const HostTensor& c, int64_t s) {
  if (!is_float(c.dtype)) return false;
  bool exact = true;
  const bool ok = causal_constant(c, s, [&](int64_t i) {
    const double v = c.float_at(i);
    if (v != 0.0 && !(v <= kMaskedBelow)) exact = false;
    return v <= kMaskedBelow;
  });
  return ok && exact;
}

// K [B, H, S, D] when kt ([B, H, D, S]) is Reshape(Transpose(Reshape(K, [B·H, S, D]),
// [0, 2, 1]), [B, H, D, S]), each link read by the next alone: how torch's dynamo
// exporter writes SDPA's Kᵀ (through 3-D batched views); the chain's nodes are added
// to `nodes` (the fused node replaces them). -1 otherwise.
int key_behind_flat_transpose(const Graph& g, const Consumers& cons, int kt, const Shape& kts,
                              std::vector<int>& nodes) {
  const Node* r2 = producer(g, kt);
  if (!r2 || r2->op_type != "Reshape" || r2->inputs.empty() || only_consumer(g, cons, kt) < 0)
    return -1;
  const int t_out = r2->inputs[0];
  const Node* t = producer(g, t_out);
  if (!t || t->op_type != "Transpose" || t->attr_ints("perm") != std::vector<int64_t>{0, 2, 1} ||
      only_consumer(g, cons, t_out) < 0)
    return -1;
  const int r1_out = t->inputs[0];
  const Node* r1 = producer(g, r1_out);
  if (!r1 || r1->op_type != "Reshape" || r1->inputs.empty() || only_consumer(g, cons, r1_out) < 0)
    return -1;
  const int k = r1->inputs[0];
  const std::optional<TensorSpec> ks = spec_of(g, k), fs = spec_of(g, r1_out);
  const Shape want_k = {kts[0], kts[1], kts[3], kts[2]};
  const Shape want_flat = {kts[0] * kts[1], kts[3], kts[2]};
  if (!ks || !fs || ks->shape != want_k || fs->shape != want_flat) return -1;
  nodes.insert(nodes.end(), {g.values[kt].producer, g.values[t_out].producer,
                             g.values[r1_out].producer});
  return k;
}

std::optional<AttnMatch> match(const Graph& g, const Consumers& cons, int sm_index) {
  const Node& sm = g.nodes[sm_index];
  if (sm.inputs.empty() || sm.outputs.empty()) return std::nullopt;
  const std::optional<TensorSpec> ss = spec_of(g, sm.inputs[0]);
  if (!ss || ss->shape.size() != 4 || !is_float(ss->dtype)) return std::nullopt;
  const int64_t axis = sm.attr_int("axis", -1);
  if (axis != -1 && axis != 3) return std::nullopt;
  const Shape scores = ss->shape;  // [B, H, Sq, Sk]
  AttnMatch m;
  m.nodes = {sm_index};
  // Backwards from the Softmax input: masks first, then scales, then MatMul(Q, Kᵀ).
  int cur = sm.inputs[0];
  bool seen_add = false, seen_where = false, scaling = false;
  int qk = -1;
  std::vector<std::string> steps;
  while (true) {
    if (only_consumer(g, cons, cur) < 0) return std::nullopt;
    const Node* p = producer(g, cur);
    if (!p) return std::nullopt;
    const int pi = g.values[cur].producer;
    const std::optional<TensorSpec> ps = spec_of(g, cur);
    if (!ps || ps->shape != scores) return std::nullopt;
    if (p->op_type == "MatMul") {
      qk = pi;
      break;
    }
    if (!scaling && !seen_add && binary(*p, "Add")) {
      // The chain operand is the one whose producer continues the pattern; the other
      // is the mask (it must broadcast into the scores, not widen them).
      const int a = p->inputs[0], b = p->inputs[1];
      const Node* pa = producer(g, a);
      const bool a_chain = pa && spec_of(g, a) && spec_of(g, a)->shape == scores &&
                           (pa->op_type == "MatMul" || pa->op_type == "Mul" ||
                            pa->op_type == "Div" || pa->op_type == "Where");
      const int chain = a_chain ? a : b, mask = a_chain ? b : a;
      const std::optional<TensorSpec> ms = spec_of(g, mask);
      if (chain == mask || !ms || ms->shape.size() > 4 || ms->dtype != ss->dtype)
        return std::nullopt;
      for (std::size_t i = 0; i < ms->shape.size(); ++i) {
        const int64_t d = ms->shape[i], full = scores[4 - ms->shape.size() + i];
        if (d != 1 && d != full) return std::nullopt;
      }
      const HostTensor& mc = g.values[mask].constant;
      if (mc.defined() && scores[2] == scores[3] && causal_additive(mc, scores[3])) {
        m.causal = true;
        steps.push_back("Add(causal mask)");
      } else {
        m.mask = mask;
        steps.push_back("Add(mask)");
      }
      seen_add = true;
      m.nodes.push_back(pi);
      cur = chain;
      continue;
    }
    if (!scaling && !seen_where && p->op_type == "Where" && p->inputs.size() == 3) {
      const HostTensor& cond = p->inputs[0] >= 0 ? g.values[p->inputs[0]].constant : HostTensor{};
      if (!cond.defined() || cond.dtype != DType::kBool || scores[2] != scores[3])
        return std::nullopt;
      // Where(keep, S, fill) or Where(hide, fill, S), fill a constant scalar.
      const bool keep_form = scalar_constant(g, p->inputs[2]).has_value();
      const int chain = keep_form ? p->inputs[1] : p->inputs[2];
      const std::optional<double> fill =
          scalar_constant(g, keep_form ? p->inputs[2] : p->inputs[1]);
      if (!fill || !(*fill <= kMaskedBelow)) return std::nullopt;
      const uint8_t* cb = cond.ptr<const uint8_t>();
      const bool causal = causal_constant(
          cond, scores[3], [&](int64_t i) { return keep_form ? cb[i] == 0 : cb[i] != 0; });
      if (!causal) return std::nullopt;
      m.causal = true;
      seen_where = true;
      steps.push_back("Where(causal)");
      m.nodes.push_back(pi);
      cur = chain;
      continue;
    }
    if (binary(*p, "Mul") || binary(*p, "Div")) {
      const bool div = p->op_type == "Div";
      const int c_in =
          div ? p->inputs[1] : (scalar_constant(g, p->inputs[1]) ? p->inputs[1] : p->inputs[0]);
      const int chain = c_in == p->inputs[0] ? p->inputs[1] : p->inputs[0];
      const std::optional<double> c = scalar_constant(g, c_in);
      if (!c || *c == 0.0 || chain == c_in) return std::nullopt;
      m.scale = div ? m.scale / *c : m.scale * *c;
      scaling = true;
      steps.push_back(div ? "Div(scale)" : "Mul(scale)");
      m.nodes.push_back(pi);
      cur = chain;
      continue;
    }
    return std::nullopt;
  }
  // MatMul(Q | Mul(Q, c), Kᵀ | Mul(Kᵀ, c))
  const Node& mm = g.nodes[qk];
  if (mm.inputs.size() != 2) return std::nullopt;
  m.nodes.push_back(qk);
  auto unscale = [&](int operand) {
    const Node* p = producer(g, operand);
    if (!p || !binary(*p, "Mul") || only_consumer(g, cons, operand) < 0) return operand;
    for (int side = 0; side < 2; ++side) {
      const std::optional<double> c = scalar_constant(g, p->inputs[side]);
      if (c && *c != 0.0 && !scalar_constant(g, p->inputs[1 - side])) {
        m.scale *= *c;
        m.nodes.push_back(g.values[operand].producer);
        return p->inputs[1 - side];
      }
    }
    return operand;
  };
  m.q = unscale(mm.inputs[0]);
  m.kt = unscale(mm.inputs[1]);
  const std::optional<TensorSpec> qs = spec_of(g, m.q), kts = spec_of(g, m.kt);
  if (!qs || !kts || qs->shape.size() != 4 || kts->shape.size() != 4 || qs->dtype != ss->dtype ||
      kts->dtype != ss->dtype)
    return std::nullopt;
  const Shape &q = qs->shape, &kt = kts->shape;
  if (kt[0] != q[0] || kt[1] != q[1] || kt[2] != q[3] || q[0] != scores[0] || q[1] != scores[1] ||
      q[2] != scores[2] || kt[3] != scores[3])
    return std::nullopt;
  if (const Node* t = producer(g, m.kt); t && t->op_type == "Transpose" &&
                                         only_consumer(g, cons, m.kt) >= 0 &&
                                         t->attr_ints("perm").size() == 4)
    m.kt_transpose = g.values[m.kt].producer;
  else
    m.k_direct = key_behind_flat_transpose(g, cons, m.kt, kt, m.nodes);
  // Softmax -> [Cast to its own dtype] -> MatMul(P, V)
  bool cast = false;
  int p = sm.outputs[0];
  int k = only_consumer(g, cons, p);
  if (k >= 0 && g.nodes[k].op_type == "Cast") {
    const std::optional<TensorSpec> cs = spec_of(g, g.nodes[k].outputs[0]);
    if (!cs || cs->dtype != ss->dtype) return std::nullopt;
    m.nodes.push_back(k);
    p = g.nodes[k].outputs[0];
    k = only_consumer(g, cons, p);
    cast = true;
  }
  // Where(IsNaN(P), 0, P): P read by exactly those two nodes.
  if (k < 0 && !is_output(g, p) && cons[p].size() == 2) {
    int isnan = -1, where = -1;
    for (int c : cons[p]) {
      if (g.nodes[c].op_type == "IsNaN") isnan = c;
      if (g.nodes[c].op_type == "Where") where = c;
    }
    if (isnan >= 0 && where >= 0) {
      const Node& w = g.nodes[where];
      const int flags = g.nodes[isnan].outputs[0];
      const std::optional<double> zero =
          w.inputs.size() == 3 ? scalar_constant(g, w.inputs[1]) : std::nullopt;
      if (w.inputs[0] == flags && w.inputs[2] == p && zero && *zero == 0.0 &&
          only_consumer(g, cons, flags) == where && spec_of(g, w.outputs[0]) &&
          spec_of(g, w.outputs[0])->shape == scores) {
        m.nodes.push_back(isnan);
        m.nodes.push_back(where);
        m.nan_rows_zero = true;
        p = w.outputs[0];
        k = only_consumer(g, cons, p);
      }
    }
  }
  if (k < 0 || !binary(g.nodes[k], "MatMul") || g.nodes[k].inputs[0] != p) return std::nullopt;
  m.v = g.nodes[k].inputs[1];
  const std::optional<TensorSpec> vs = spec_of(g, m.v);
  if (!vs || vs->shape.size() != 4 || vs->dtype != ss->dtype || vs->shape[0] != q[0] ||
      vs->shape[1] != q[1] || vs->shape[2] != scores[3])
    return std::nullopt;
  m.nodes.push_back(k);
  m.out = g.nodes[k].outputs[0];
  std::ostringstream os;
  os.precision(6);
  os << "attention (scale " << m.scale << (m.causal ? ", causal" : "")
     << (m.mask >= 0 ? ", additive mask" : "") << "): MatMul("
     << (m.q != mm.inputs[0] ? "Mul(Q)" : "Q") << ", "
     << (m.kt != mm.inputs[1] ? "Mul(K^T)" : "K^T") << ")";
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) os << " -> " << *it;
  os << " -> Softmax(-1)" << (cast ? " -> Cast(same dtype)" : "")
     << (m.nan_rows_zero ? " -> Where(IsNaN, 0)" : "") << " -> MatMul(V)";
  m.pattern = os.str();
  return m;
}

// src [B, Hkv, S, D] when x ([B, Hkv·n, S, D]) is Reshape(Expand(Unsqueeze(src) to
// [B, Hkv, 1, S, D]) to [B, Hkv, n, S, D]): the repeat_kv of grouped-query attention
// (Llama, Qwen2, Mistral exports), query head h reading key/value head h / n. The
// chain's nodes, each read by the next alone, go to `nodes`. -1 otherwise.
int repeat_kv_source(const Graph& g, const Consumers& cons, int x, std::vector<int>& nodes) {
  if (x < 0) return -1;
  auto link = [&](int v, const char* op) -> const Node* {
    const Node* p = producer(g, v);
    if (!p || p->op_type != op || p->inputs.empty() || only_consumer(g, cons, v) < 0 ||
        is_output(g, v))
      return nullptr;
    return p;
  };
  const Node* reshape = link(x, "Reshape");
  const Node* expand = reshape ? link(reshape->inputs[0], "Expand") : nullptr;
  const Node* unsq = expand ? link(expand->inputs[0], "Unsqueeze") : nullptr;
  if (!unsq) return -1;
  const int src = unsq->inputs[0];
  const std::optional<TensorSpec> xs = spec_of(g, x), es = spec_of(g, reshape->inputs[0]),
                                  us = spec_of(g, expand->inputs[0]), ss = spec_of(g, src);
  if (!xs || !es || !us || !ss || ss->shape.size() != 4 || xs->shape.size() != 4) return -1;
  const Shape& s = ss->shape;
  const int64_t n = s[1] > 0 ? xs->shape[1] / s[1] : 0;
  if (n < 1 || us->shape != Shape{s[0], s[1], 1, s[2], s[3]} ||
      es->shape != Shape{s[0], s[1], n, s[2], s[3]} ||
      xs->shape != Shape{s[0], s[1] * n, s[2], s[3]})
    return -1;
  nodes.insert(nodes.end(), {g.values[x].producer, g.values[reshape->inputs[0]].producer,
                             g.values[expand->inputs[0]].producer});
  return src;
}

// Kᵀ's Transpose permutation turned into K's (its last two entries swapped).
std::vector<int64_t> k_perm(const Graph& g, int transpose) {
  std::vector<int64_t> p = g.nodes[transpose].attr_ints("perm");
  std::swap(p[2], p[3]);
  return p;
}

}  // namespace

int fuse_attention_patterns(Graph& g, const ExecutionProvider& provider,
                            std::vector<std::string>& decisions) {
  const Consumers cons = consumers(g);
  std::vector<char> taken(g.nodes.size(), 0);
  int fused = 0;
  const std::size_t count = g.nodes.size();
  for (std::size_t s = 0; s < count; ++s) {
    if (taken[s] || g.nodes[s].op_type != "Softmax") continue;
    std::optional<AttnMatch> m = match(g, cons, static_cast<int>(s));
    if (!m || std::any_of(m->nodes.begin(), m->nodes.end(), [&](int i) { return taken[i]; }))
      continue;
    const TensorSpec qs = *spec_of(g, m->q), kts = *spec_of(g, m->kt), vs = *spec_of(g, m->v);
    const Shape ks = {kts.shape[0], kts.shape[1], kts.shape[3], kts.shape[2]};
    ops::AttentionAttrs attrs;
    attrs.scale = m->scale;
    attrs.causal = m->causal;
    attrs.nan_rows_zero = m->nan_rows_zero;
    attrs.mask =
        m->mask >= 0 ? ops::AttentionAttrs::Mask::kAdditive : ops::AttentionAttrs::Mask::kNone;
    Candidate c;
    const std::string& base = g.nodes[s].name;
    c.node.name =
        unique_node_name(g, base.empty() ? std::string("attention") : base + "_attention");
    c.node.op_type = "FusedAttention";
    c.node.domain = "xrt";
    attrs.to_attrs(c.node.attrs);
    c.inputs = {qs, TensorSpec{kts.dtype, ks, {}}, vs};
    if (m->mask >= 0) c.inputs.push_back(*spec_of(g, m->mask));
    c.outputs = {*spec_of(g, m->out)};
    c.pattern = m->pattern;
    // A 16-bit mask (a reduced-precision plan) that no kernel takes as it is goes in
    // as float32 through a Cast: flash_v2 reads additive masks in float32 only.
    bool cast_mask = false;
    if (m->mask >= 0 && c.inputs[3].dtype != DType::kFloat32 && !any_kernel_supports(c, provider)) {
      Candidate f32 = c;
      f32.inputs[3].dtype = DType::kFloat32;
      if (any_kernel_supports(f32, provider)) {
        c = std::move(f32);
        c.pattern += " (mask cast to float32)";
        cast_mask = true;
      }
    }
    // Grouped-query attention: K and V read before their repeat_kv copies, where a
    // kernel shares key/value heads (silently kept expanded where none does).
    int k_full = m->k_direct;  // K [B, H, S, D] as the graph has it, when no new Transpose
    if (k_full < 0 && m->kt_transpose >= 0 &&
        k_perm(g, m->kt_transpose) == std::vector<int64_t>{0, 1, 2, 3})
      k_full = g.nodes[m->kt_transpose].inputs[0];
    std::vector<int> repeat_nodes;
    const int k_src = repeat_kv_source(g, cons, k_full, repeat_nodes);
    const int v_src = k_src >= 0 ? repeat_kv_source(g, cons, m->v, repeat_nodes) : -1;
    bool gqa = false;
    if (k_src >= 0 && v_src >= 0 && spec_of(g, k_src)->shape == spec_of(g, v_src)->shape) {
      Candidate shared = c;
      shared.inputs[1] = *spec_of(g, k_src);
      shared.inputs[2] = *spec_of(g, v_src);
      if (any_kernel_supports(shared, provider)) {
        c = std::move(shared);
        c.pattern += " (grouped-query: key/value read before repeat_kv)";
        gqa = true;
      }
    }
    if (!kernel_runs(c, provider, decisions)) continue;
    int mask = m->mask;
    if (cast_mask) {
      mask = new_value(g, c.node.name + "_mask", DType::kFloat32, c.inputs[3].shape);
      Node cast;
      cast.name = unique_node_name(g, c.node.name + "_mask_cast");
      cast.op_type = "Cast";
      cast.attrs["to"] = Attr::of_int(1);  // ONNX FLOAT
      cast.inputs = {m->mask};
      cast.outputs = {mask};
      g.nodes.push_back(std::move(cast));
    }
    // K for the node: from Kᵀ's own Transpose (re-permuted), else a new Transpose.
    int k = -1;
    int v = m->v;
    if (gqa) {
      k = k_src;
      v = v_src;
      if (m->k_direct < 0) {  // the identity Transpose of Kᵀ goes too
        g.nodes[m->kt_transpose].op_type.clear();
        taken[m->kt_transpose] = 1;
      }
      for (int i : repeat_nodes) {
        taken[i] = 1;
        g.nodes[i].op_type.clear();
      }
    } else if (m->k_direct >= 0) {
      k = m->k_direct;  // the Kᵀ chain's nodes are in m->nodes: removed below
    } else if (m->kt_transpose >= 0) {
      const std::vector<int64_t> perm = k_perm(g, m->kt_transpose);
      const bool identity = perm == std::vector<int64_t>{0, 1, 2, 3};
      Node& t = g.nodes[m->kt_transpose];
      if (identity) {
        k = t.inputs[0];
        t.op_type.clear();
        taken[m->kt_transpose] = 1;
      } else {
        k = new_value(g, c.node.name + "_key", kts.dtype, ks);
        t.attrs["perm"] = Attr::of_ints(perm);
        t.outputs[0] = k;
      }
    } else {
      k = new_value(g, c.node.name + "_key", kts.dtype, ks);
      Node t;
      t.name = unique_node_name(g, c.node.name + "_key_transpose");
      t.op_type = "Transpose";
      t.attrs["perm"] = Attr::of_ints({0, 1, 3, 2});
      t.inputs = {m->kt};
      t.outputs = {k};
      g.nodes.push_back(std::move(t));
    }
    Node f = std::move(c.node);
    f.inputs = {m->q, k, v};
    if (mask >= 0) f.inputs.push_back(mask);
    f.outputs = {m->out};
    for (int i : m->nodes) {
      taken[i] = 1;
      g.nodes[i].op_type.clear();
    }
    g.nodes.push_back(std::move(f));
    ++fused;
  }
  compact(g);
  return fused;
}

}  // namespace xpuruntime::graph::passes
