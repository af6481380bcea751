// Fusion passes: epilogues into Conv/MatMul/Gemm (the data is still in cache, or in
// registers, when the bias/residual/activation are applied) and chains of elementwise
// ops of one float dtype into one FusedElementwise node (one pass over memory). Each
// fires only where the device's kernels run the result: the provider's
// takes_epilogue() for epilogues, the registry for fused chains.
#include <algorithm>
#include <cmath>

#include "graph/fusion_patterns.h"
#include "graph/passes.h"
#include "xpuruntime/ops/elementwise.h"
#include "xpuruntime/ops/elementwise_program.h"
#include "xpuruntime/ops/epilogue.h"

namespace xpuruntime::graph::passes {
namespace {

using ops::FusedBin;
using ops::Unary;

bool is_output(const Graph& g, int v) {
  return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
}

// v is read by exactly one node and is not a graph output.
bool single_use(const Graph& g, const std::vector<std::vector<int>>& cons, int v) {
  return v >= 0 && cons[v].size() == 1 && !is_output(g, v) &&
         std::count(g.nodes[cons[v][0]].inputs.begin(), g.nodes[cons[v][0]].inputs.end(), v) == 1;
}

bool const_scalar(const Graph& g, int v, double& out) {
  if (v < 0 || !g.values[v].constant.defined() || g.values[v].constant.numel() != 1) return false;
  out = g.values[v].constant.float_at(0);
  return true;
}

// The epilogue of `p` with activation node `a` absorbed (Clip bounds must be
// constants); false when `a` cannot be an epilogue.
bool with_activation(const Graph& g, const Node& p, const Node& a, ops::Epilogue& e) {
  double lo = -INFINITY, hi = INFINITY;
  if (a.op_type == "Clip") {
    lo = a.attr_float("min", lo);
    hi = a.attr_float("max", hi);
    if (a.inputs.size() > 1 && a.inputs[1] >= 0 && !const_scalar(g, a.inputs[1], lo)) return false;
    if (a.inputs.size() > 2 && a.inputs[2] >= 0 && !const_scalar(g, a.inputs[2], hi)) return false;
  }
  e = ops::Epilogue::from_node(p);
  return ops::Epilogue::activation_of(a, lo, hi, e);
}

// v has dtype t (a float dtype the pass works in).
bool of_dtype(const Graph& g, int v, DType t) {
  if (v < 0) return false;
  const Value& val = g.values[v];
  return (val.constant.defined() ? val.constant.dtype : val.dtype) == t;
}

bool float_dtype(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16;
}

// Whether the epilogue e of op_type may form on outputs of dtype t.
bool epilogue_ok(const ExecutionProvider* provider, const std::string& op_type,
                 const ops::Epilogue& e, DType t) {
  if (provider == nullptr) return t == DType::kFloat32;
  return float_dtype(t) && provider->takes_epilogue(op_type, e, t);
}

// Whether a kernel runs NhwcConv p with epilogue e. The layout pass creates NhwcConv
// after the first epilogue round, and which activations a channels-last convolution
// takes depends on the kernel its case gets (the depthwise kernel applies any of
// them, cuDNN's only Relu): the registry answers for the exact node.
bool nhwc_conv_takes(const Graph& g, const Node& p, const ops::Epilogue& e,
                     const ExecutionProvider* provider) {
  if (provider == nullptr) return false;
  patterns::Candidate c;
  c.node = p;
  e.to_attrs(c.node.attrs);
  for (int v : p.inputs) c.inputs.push_back(patterns::spec_of(g, v).value_or(TensorSpec{}));
  for (int v : p.outputs) c.outputs.push_back(patterns::spec_of(g, v).value_or(TensorSpec{}));
  return patterns::any_kernel_supports(c, *provider);
}

// Shape s broadcasts into o as a suffix (bias row) or scalar, or equals o.
bool suffix_compatible(const Shape& s, const Shape& o) {
  if (shape_numel(s) == 1) return true;
  std::size_t lead = 0;
  while (lead < s.size() && s[lead] == 1) ++lead;
  const std::size_t len = s.size() - lead;
  if (len > o.size()) return false;
  return std::equal(s.begin() + lead, s.end(), o.end() - len);
}

// Shape s broadcasts into o by numpy's rules (each trailing dim 1 or equal): what a
// device's fused kernel with general broadcasting (CUDA's) reads, e.g. NCHW
// per-channel [C, 1, 1] parameters.
bool broadcasts_into(const Shape& s, const Shape& o) {
  if (s.size() > o.size()) return false;
  const std::size_t lead = o.size() - s.size();
  for (std::size_t i = 0; i < s.size(); ++i)
    if (s[i] != 1 && s[i] != o[lead + i]) return false;
  return true;
}

bool fused_binary(const std::string& op, FusedBin& b) {
  static const std::pair<const char*, FusedBin> kOps[] = {
      {"Add", FusedBin::kAdd}, {"Sub", FusedBin::kSub}, {"Mul", FusedBin::kMul},
      {"Div", FusedBin::kDiv}, {"Pow", FusedBin::kPow}, {"Min", FusedBin::kMin},
      {"Max", FusedBin::kMax}};
  for (auto& [name, code] : kOps)
    if (op == name) {
      b = code;
      return true;
    }
  return false;
}

using Instr = ops::ElementwiseInstr;

// Describes node n as one instruction on the accumulator value `acc`, every value
// involved of dtype t. Operands broadcast as suffixes (bias rows, scalars), or by
// numpy's general rules where `general` (the provider's kernels decide: the CPU's
// fused kernel reads suffixes only and refuses the others in its support check).
bool as_instr(const Graph& g, const Node& n, int acc, DType t, bool general, Instr& ins) {
  if (n.outputs.empty() || !of_dtype(g, n.outputs[0], t) || !g.values[n.outputs[0]].shape)
    return false;
  for (std::size_t j = 1; j < n.outputs.size(); ++j)
    if (n.outputs[j] >= 0) return false;
  FusedBin b;
  if (fused_binary(n.op_type, b)) {
    if (n.inputs.size() != 2 || n.inputs[0] == n.inputs[1]) return false;
    const int other = n.inputs[0] == acc ? n.inputs[1] : n.inputs[0];
    if (!of_dtype(g, other, t) || (!g.values[other].shape && !g.values[other].constant.defined()))
      return false;
    const Shape os = g.values[other].constant.defined() ? g.values[other].constant.shape
                                                        : *g.values[other].shape;
    const Shape& out = *g.values[n.outputs[0]].shape;
    if (general ? !broadcasts_into(os, out) : !suffix_compatible(os, out)) return false;
    ins.kind = n.inputs[0] == acc ? Instr::Kind::kBinary : Instr::Kind::kBinaryOperandLeft;
    ins.binary = b;
    ins.operand = other;  // a graph value id until the program is encoded
    return true;
  }
  Unary k;
  if (n.op_type == "Clip") {
    k = Unary::kClip;
    double lo = n.attr_float("min", -INFINITY), hi = n.attr_float("max", INFINITY);
    if (n.inputs.size() > 1 && n.inputs[1] >= 0 && !const_scalar(g, n.inputs[1], lo)) return false;
    if (n.inputs.size() > 2 && n.inputs[2] >= 0 && !const_scalar(g, n.inputs[2], hi)) return false;
    ins.params.lo = lo;
    ins.params.hi = hi;
  } else if (!ops::unary_kind(n, k) || n.inputs.size() != 1 || k == Unary::kNot) {
    return false;
  }
  if (k != Unary::kClip) ins.params = ops::unary_params(n, k);
  ins.kind = Instr::Kind::kUnary;
  ins.unary = k;
  return true;
}

// The Reshape that alone reads y (itself read once), or null: an epilogue may look
// through it (it keeps the bytes; the Reshape then yields the epilogue's result).
Node* through_reshape(Graph& g, const std::vector<std::vector<int>>& cons, int y) {
  Node& r = g.nodes[cons[y][0]];
  if (r.op_type == "Reshape" && r.inputs[0] == y && r.outputs.size() == 1 &&
      single_use(g, cons, r.outputs[0]))
    return &r;
  return nullptr;
}

// The chain of elementwise nodes from `start` on its first input (each read once by
// the next, same output shape, dtype t), as node indices; shorter than 2: none.
std::vector<int> fusable_chain(const Graph& g, const std::vector<std::vector<int>>& cons,
                               const std::vector<bool>& taken, int start, DType t, bool general) {
  const Node& n0 = g.nodes[start];
  const int acc0 = n0.inputs[0];
  Instr first;
  if (!as_instr(g, n0, acc0, t, general, first)) return {};
  const Shape out_shape = *g.values[n0.outputs[0]].shape;
  const Value& a = g.values[acc0];
  const Shape as = a.constant.defined() ? a.constant.shape : (a.shape ? *a.shape : Shape{-1});
  if (general ? !broadcasts_into(as, out_shape) : !suffix_compatible(as, out_shape)) return {};
  std::vector<int> chain = {start};
  int cur = n0.outputs[0];
  while (single_use(g, cons, cur)) {
    const int next = cons[cur][0];
    const Node& c = g.nodes[next];
    Instr ins;
    if (taken[next] || !as_instr(g, c, cur, t, general, ins) ||
        *g.values[c.outputs[0]].shape != out_shape)
      break;
    if (ins.kind == Instr::Kind::kUnary && c.inputs[0] != cur) break;
    chain.push_back(next);
    cur = c.outputs[0];
  }
  return chain;
}

// The FusedElementwise node of a chain: inputs [acc0, operands...] (deduplicated).
Node fused_node(const Graph& g, const std::vector<int>& chain, DType t, bool general) {
  const Node& n0 = g.nodes[chain[0]];
  Node f;
  f.name = n0.name + "_fused";
  f.op_type = "FusedElementwise";
  f.domain = "xrt";
  f.inputs.push_back(n0.inputs[0]);
  ops::ElementwiseProgram program;
  int cur = n0.inputs[0];
  for (int k : chain) {
    const Node& n = g.nodes[k];
    Instr ins;
    as_instr(g, n, cur, t, general, ins);  // accepted as the chain was built
    if (ins.kind != Instr::Kind::kUnary) {
      auto it = std::find(f.inputs.begin(), f.inputs.end(), ins.operand);
      if (it == f.inputs.end()) {
        f.inputs.push_back(ins.operand);
        ins.operand = static_cast<int>(f.inputs.size()) - 1;
      } else {
        ins.operand = static_cast<int>(it - f.inputs.begin());
      }
    }
    program.instrs.push_back(ins);
    program.ops += (program.ops.empty() ? "" : ",") + n.op_type;
    cur = n.outputs[0];
  }
  program.to_attrs(f.attrs);
  f.outputs = {cur};
  return f;
}

// Whether a kernel of the provider runs fused node f (dtype t).
bool kernel_takes(const Graph& g, const Node& f, DType t, const ExecutionProvider& provider) {
  patterns::Candidate c;
  c.node = f;
  for (int v : f.inputs)
    c.inputs.push_back(patterns::spec_of(g, v).value_or(TensorSpec{t, {}, {}}));
  c.outputs.push_back(TensorSpec{t, *g.values[f.outputs[0]].shape, {}});
  return patterns::any_kernel_supports(c, provider);
}

}  // namespace

int fuse_epilogues(Graph& g, const ExecutionProvider* provider) {
  int fused = 0;
  auto cons = consumers(g);
  // MatMul + Add(constant row of N) -> bias epilogue.
  for (Node& mm : g.nodes) {
    if (mm.op_type != "MatMul" || mm.outputs.empty()) continue;
    const int y = mm.outputs[0];
    const DType t = g.values[y].dtype;
    if (!single_use(g, cons, y) || !g.values[y].shape || g.values[y].shape->empty()) continue;
    Node& add = g.nodes[cons[y][0]];
    if (add.op_type != "Add" || add.inputs.size() != 2) continue;
    const int other = add.inputs[0] == y ? add.inputs[1] : add.inputs[0];
    const Value& ov = g.values[other];
    const int64_t nn = g.values[y].shape->back();
    if (!ov.constant.defined() || ov.constant.dtype != t || ov.constant.numel() != nn ||
        !suffix_compatible(ov.constant.shape, *g.values[y].shape) ||
        g.values[add.outputs[0]].shape != g.values[y].shape)
      continue;
    ops::Epilogue e = ops::Epilogue::from_node(mm);
    e.bias = true;
    if (!epilogue_ok(provider, mm.op_type, e, t)) continue;
    mm.inputs.resize(2);
    mm.inputs.push_back(other);
    e.to_attrs(mm.attrs);
    mm.outputs[0] = add.outputs[0];
    add.op_type.clear();
    ++fused;
  }
  compact(g);
  cons = consumers(g);
  // Conv + Add(same-shaped tensor) -> residual epilogue.
  for (Node& cv : g.nodes) {
    if (cv.op_type != "Conv" || cv.outputs.empty()) continue;
    const int y = cv.outputs[0];
    const DType t = g.values[y].dtype;
    if (!single_use(g, cons, y) || !g.values[y].shape) continue;
    Node& add = g.nodes[cons[y][0]];
    if (add.op_type != "Add" || add.inputs.size() != 2 || add.inputs[0] == add.inputs[1]) continue;
    const int other = add.inputs[0] == y ? add.inputs[1] : add.inputs[0];
    if (!g.values[other].shape || *g.values[other].shape != *g.values[y].shape ||
        g.values[add.outputs[0]].shape != g.values[y].shape || !of_dtype(g, other, t))
      continue;
    ops::Epilogue e = ops::Epilogue::from_node(cv);
    // A Conv that already applies an activation (an earlier round) adds its residual
    // before that activation: Add(act(conv), r) is not act(conv + r).
    if (e.residual || e.has_activation()) continue;
    e.residual = true;
    if (!epilogue_ok(provider, cv.op_type, e, t)) continue;
    cv.inputs.resize(3, -1);
    cv.inputs.push_back(other);
    e.to_attrs(cv.attrs);
    cv.outputs[0] = add.outputs[0];
    add.op_type.clear();
    ++fused;
  }
  compact(g);
  cons = consumers(g);
  // {MatMul, Gemm} [+ Reshape] + Add(same-shaped tensor) -> residual epilogue: every
  // transformer block's skip connection, read by the GEMM as its C (beta 1) instead of
  // an elementwise kernel re-reading both tensors. A Gemm qualifies with no C or a
  // bias-row C (alpha = beta = 1); the Reshape (GPT-2's Conv1D views) keeps the bytes.
  for (Node& mm : g.nodes) {
    if ((mm.op_type != "MatMul" && mm.op_type != "Gemm") || mm.outputs.empty()) continue;
    ops::Epilogue e = ops::Epilogue::from_node(mm);
    if (e.residual || e.has_activation()) continue;
    if (mm.op_type == "Gemm" && mm.inputs.size() > 2 && mm.inputs[2] >= 0) {
      const Value& c = g.values[mm.inputs[2]];
      const Shape& ys = g.values[mm.outputs[0]].shape.value_or(Shape{});
      if (mm.attr_float("alpha", 1.0) != 1.0 || mm.attr_float("beta", 1.0) != 1.0 ||
          !c.constant.defined() || ys.empty() || c.constant.numel() != ys.back())
        continue;
    }
    const int y = mm.outputs[0];
    const DType t = g.values[y].dtype;
    if (!single_use(g, cons, y) || !g.values[y].shape) continue;
    Node* reshape = through_reshape(g, cons, y);
    const int x = reshape != nullptr ? reshape->outputs[0] : y;
    Node& add = g.nodes[cons[x][0]];
    if (add.op_type != "Add" || add.inputs.size() != 2 || add.inputs[0] == add.inputs[1]) continue;
    const int other = add.inputs[0] == x ? add.inputs[1] : add.inputs[0];
    if (!g.values[x].shape || !g.values[other].shape || *g.values[other].shape != *g.values[x].shape ||
        g.values[add.outputs[0]].shape != g.values[x].shape || !of_dtype(g, other, t) ||
        g.values[other].constant.defined())
      continue;
    e.residual = true;
    if (!epilogue_ok(provider, mm.op_type, e, t)) continue;
    mm.inputs.resize(3, -1);
    mm.inputs.push_back(other);
    e.to_attrs(mm.attrs);
    (reshape != nullptr ? reshape->outputs[0] : mm.outputs[0]) = add.outputs[0];
    add.op_type.clear();
    ++fused;
  }
  compact(g);
  cons = consumers(g);
  // {Conv, MatMul, Gemm, NhwcConv} + activation.
  for (Node& p : g.nodes) {
    const bool nhwc = p.op_type == "NhwcConv";
    if ((p.op_type != "Conv" && p.op_type != "MatMul" && p.op_type != "Gemm" && !nhwc) ||
        ops::Epilogue::from_node(p).has_activation() || p.has("_swish"))
      continue;
    const int y = p.outputs[0];
    const DType t = g.values[y].dtype;
    if (!single_use(g, cons, y)) continue;
    // Through one Reshape (an activation commutes with it): GPT-2's Conv1D is
    // Gemm -> Reshape [B, S, N] -> GELU. The Reshape then yields the activated values.
    Node* reshape = through_reshape(g, cons, y);
    const int x = reshape != nullptr ? reshape->outputs[0] : y;
    Node& a = g.nodes[cons[x][0]];
    if (a.inputs.empty() || a.inputs[0] != x || a.outputs.size() != 1) continue;
    ops::Epilogue e;
    if (!with_activation(g, p, a, e)) continue;
    if (nhwc ? !nhwc_conv_takes(g, p, e, provider) : !epilogue_ok(provider, p.op_type, e, t))
      continue;
    e.to_attrs(p.attrs);
    (reshape != nullptr ? reshape->outputs[0] : p.outputs[0]) = a.outputs[0];
    a.op_type.clear();
    ++fused;
  }
  compact(g);
  return fused;
}

int fuse_elementwise(Graph& g, const ExecutionProvider* provider) {
  int fused = 0;
  auto cons = consumers(g);
  std::vector<bool> taken(g.nodes.size(), false);
  for (int start : g.topo_order()) {
    if (taken[start]) continue;
    const Node& n0 = g.nodes[start];
    if (n0.inputs.empty() || n0.inputs[0] < 0) continue;
    // The chain's dtype: its first input's. Without a provider float32 only (the
    // CPU's fused kernel); with one, any float dtype a kernel of it runs.
    const Value& a0 = g.values[n0.inputs[0]];
    const DType t = a0.constant.defined() ? a0.constant.dtype : a0.dtype;
    if (provider == nullptr ? t != DType::kFloat32 : !float_dtype(t)) continue;
    // Operands broadcast by numpy's rules first where a provider's kernel may read them
    // (CUDA's does); where its kernels refuse such a chain (the CPU's reads suffixes
    // only), the chain as far as suffix operands go.
    std::vector<int> chain;
    Node f;
    bool found = false;
    const std::vector<bool> tries =
        provider != nullptr ? std::vector<bool>{true, false} : std::vector<bool>{false};
    for (const bool general : tries) {
      chain = fusable_chain(g, cons, taken, start, t, general);
      if (chain.size() < 2) continue;
      f = fused_node(g, chain, t, general);
      found = provider == nullptr || kernel_takes(g, f, t, *provider);
      if (found) break;
    }
    if (!found) continue;
    for (int k : chain) {
      taken[k] = true;
      g.nodes[k].op_type.clear();
    }
    g.nodes.push_back(std::move(f));
    taken.push_back(true);
    ++fused;
  }
  compact(g);
  return fused;
}

}  // namespace xpuruntime::graph::passes
