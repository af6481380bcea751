// The head transposes around a FusedAttention, folded into it. Every transformer
// export computes
//
//   q = Transpose(Reshape(MatMul(x, Wq), [B, S, H, D]), [0, 2, 1, 3])     (and k, v)
//   y = Reshape(Transpose(FusedAttention(q, k, v), [0, 2, 1, 3]), [B, S, H * D])
//
// and those four Transposes each read and write the whole activation: with the
// Reshapes as views they were 30-50% of BERT's, ViT's and GPT-2's GPU time. A kernel
// that reads Q, K, V and writes Y through their strides (flash_v2) takes the [B, S,
// H, D] tensors as they are: the node's "_bshd" bits say which (ops/attention.h).
// Folded only where the Transpose is the node's alone (no other reader, not a graph
// output) and a kernel of the plan's device runs the result: the CPU kernel reads
// [B, H, S, D] only, so CPU plans keep their Transposes.
#include <algorithm>

#include "graph/fusion_patterns.h"
#include "xpuruntime/ops/attention.h"

namespace xpuruntime::graph::passes {
namespace {

using namespace patterns;

const std::vector<int64_t> kHeadSwap = {0, 2, 1, 3};

bool head_swap(const Node& n) {
  return n.op_type == "Transpose" && n.inputs.size() == 1 && n.outputs.size() == 1 &&
         n.attr_ints("perm") == kHeadSwap;
}

}  // namespace

int fold_attention_transposes(Graph& g, const ExecutionProvider& provider,
                              std::vector<std::string>& decisions) {
  const Consumers cons = consumers(g);
  int folded = 0;
  const std::size_t count = g.nodes.size();
  for (std::size_t k = 0; k < count; ++k) {
    Node& a = g.nodes[k];
    if (a.op_type != "FusedAttention" || a.inputs.size() < 3 || a.outputs.empty()) continue;
    ops::AttentionAttrs attrs = ops::AttentionAttrs::from_node(a);
    if (attrs.bshd != 0) continue;
    // Inputs 0-2 produced by a head swap read by this node alone.
    std::vector<int> from(3, -1);  // the Transpose node index per input, or -1
    static constexpr int kBits[3] = {ops::AttentionAttrs::kBshdQ, ops::AttentionAttrs::kBshdK,
                                     ops::AttentionAttrs::kBshdV};
    for (int i = 0; i < 3; ++i) {
      const int v = a.inputs[static_cast<std::size_t>(i)];
      const Node* t = producer(g, v);
      if (t == nullptr || !head_swap(*t) || !single_use(g, cons, v)) continue;
      if (std::count(a.inputs.begin(), a.inputs.end(), v) != 1) continue;
      from[static_cast<std::size_t>(i)] = static_cast<int>(t - g.nodes.data());
      attrs.bshd |= kBits[i];
    }
    // The output read by a head swap alone, possibly through a Reshape to the same
    // shape (Llama's exports have one).
    int to = -1, same_reshape = -1;
    const int y = a.outputs[0];
    int z = y;
    if (single_use(g, cons, y)) {
      const Node& r = g.nodes[cons[y][0]];
      const std::optional<TensorSpec> ys = spec_of(g, y);
      if (r.op_type == "Reshape" && r.inputs[0] == y && r.outputs.size() == 1 && ys &&
          spec_of(g, r.outputs[0]) && spec_of(g, r.outputs[0])->shape == ys->shape &&
          !is_output(g, r.outputs[0])) {
        same_reshape = cons[y][0];
        z = r.outputs[0];
      }
    }
    if (single_use(g, cons, z) && head_swap(g.nodes[cons[z][0]])) {
      to = cons[z][0];
      attrs.bshd |= ops::AttentionAttrs::kBshdOut;
    } else {
      same_reshape = -1;
    }
    if (attrs.bshd == 0) continue;
    Candidate c;
    c.node = a;
    attrs.to_attrs(c.node.attrs);
    for (std::size_t i = 0; i < a.inputs.size(); ++i) {
      const int v = i < 3 && from[i] >= 0 ? g.nodes[static_cast<std::size_t>(from[i])].inputs[0]
                                          : a.inputs[i];
      c.inputs.push_back(spec_of(g, v).value_or(TensorSpec{}));
    }
    c.outputs.push_back(spec_of(g, to >= 0 ? g.nodes[static_cast<std::size_t>(to)].outputs[0] : y)
                            .value_or(TensorSpec{}));
    c.pattern = "head transposes folded into the attention (_bshd " + std::to_string(attrs.bshd) +
                ")";
    // Silent where no kernel reads the strides (every CPU plan): a Decision only for
    // a fold that happens.
    if (!any_kernel_supports(c, provider) || !kernel_runs(c, provider, decisions)) continue;
    for (std::size_t i = 0; i < 3; ++i) {
      if (from[i] < 0) continue;
      Node& t = g.nodes[static_cast<std::size_t>(from[i])];
      a.inputs[i] = t.inputs[0];
      t.op_type.clear();
    }
    if (to >= 0) {
      Node& t = g.nodes[static_cast<std::size_t>(to)];
      a.outputs[0] = t.outputs[0];
      t.op_type.clear();
      if (same_reshape >= 0) g.nodes[static_cast<std::size_t>(same_reshape)].op_type.clear();
    }
    a.attrs = c.node.attrs;
    ++folded;
  }
  compact(g);
  return folded;
}

}  // namespace xpuruntime::graph::passes
