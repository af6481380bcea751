// MatMuls that read a shared weight through a Transpose (passes.h). A language model
// with tied embeddings (GPT-2, T5, BERT's MLM head) exports its output projection
// as MatMul(x, Transpose(W)), where W [vocab, hidden] is also the Gather's table.
// Constant folding would store Wᵀ as a second constant, doubling the largest weight
// of the model (77 MB of GPT-2's 249 MB in fp16). Gemm reads W transposed itself
// (transB, a cuBLASLt and BLAS operand flag), so the MatMul becomes
//
//   Reshape(x, [-1, K]) -> Gemm(·, W, transB=1) -> Reshape(·, Concat(Shape(x)[:-1], [N]))
//
// before constant folding; the shape subgraph folds away when x's shape is static,
// and the Reshapes are views. Only where W is a 2-D constant of at least 1 MiB read
// by something besides the Transpose (an unshared W gains nothing: folding drops it),
// and where every reader of Wᵀ is a MatMul's B operand.
#include <algorithm>

#include "graph/fusion_patterns.h"
#include "graph/passes.h"

namespace xpuruntime::graph::passes {
namespace {

constexpr std::size_t kMinSharedWeightBytes = std::size_t{1} << 20;

bool swaps_two_dims(const Node& t) {
  const std::vector<int64_t> perm = t.attr_ints("perm");
  return perm.empty() || perm == std::vector<int64_t>{1, 0};
}

int fresh_value(Graph& g, const std::string& base) { return g.value_id(fresh_name(g, base)); }

Node make_node(Graph& g, const std::string& base, const char* op, std::vector<int> inputs,
               std::vector<int> outputs) {
  Node n;
  n.name = patterns::unique_node_name(g, base);
  n.op_type = op;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  return n;
}

}  // namespace

int gemm_reads_shared_weights(Graph& g) {
  const std::vector<std::vector<int>> cons = consumers(g);
  int rewritten = 0;
  const std::size_t count = g.nodes.size();
  for (std::size_t t = 0; t < count; ++t) {
    const Node& tr = g.nodes[t];
    if (tr.op_type != "Transpose" || !tr.domain.empty() || tr.inputs.size() != 1 ||
        tr.outputs.size() != 1 || tr.outputs[0] < 0 || !swaps_two_dims(tr))
      continue;
    const int w = tr.inputs[0], wt = tr.outputs[0];
    if (w < 0 || !g.values[w].constant.defined()) continue;
    const HostTensor& wc = g.values[w].constant;
    if (wc.shape.size() != 2 || wc.nbytes() < kMinSharedWeightBytes || cons[w].size() < 2) continue;
    if (std::find(g.outputs.begin(), g.outputs.end(), wt) != g.outputs.end()) continue;
    const std::vector<int>& readers = cons[wt];
    const bool all_matmul_b =
        !readers.empty() && std::all_of(readers.begin(), readers.end(), [&](int k) {
          const Node& m = g.nodes[k];
          return m.op_type == "MatMul" && m.domain.empty() && m.inputs.size() == 2 &&
                 m.inputs[1] == wt && m.inputs[0] != wt && m.outputs.size() == 1;
        });
    if (!all_matmul_b) continue;
    const int64_t k_dim = wc.shape[1], n_dim = wc.shape[0];
    for (int k : readers) {
      const Node m = g.nodes[k];  // a copy: add_node may reallocate g.nodes
      const std::string base = m.name.empty() ? std::string("matmul") : m.name;
      const int x = m.inputs[0], y = m.outputs[0];
      const int x2 = fresh_value(g, base + "_rows");
      const int c = fresh_value(g, base + "_gemm");
      const int x_shape = fresh_value(g, base + "_x_shape");
      const int lead = fresh_value(g, base + "_lead_dims");
      const int y_shape = fresh_value(g, base + "_y_shape");
      g.nodes[k].op_type.clear();  // dropped by compact() below; the Gemm takes its name
      g.nodes[k].name.clear();
      g.add_node(make_node(g, base + "_rows", "Reshape",
                           {x, patterns::int64_constant(g, base + "_rows_shape", {-1, k_dim})},
                           {x2}));
      Node gemm = make_node(g, base, "Gemm", {x2, w}, {c});
      gemm.attrs["transB"] = Attr::of_int(1);
      g.add_node(std::move(gemm));
      g.add_node(make_node(g, base + "_x_shape", "Shape", {x}, {x_shape}));
      g.add_node(make_node(g, base + "_lead_dims", "Slice",
                           {x_shape, patterns::int64_constant(g, base + "_lead_start", {0}),
                            patterns::int64_constant(g, base + "_lead_end", {-1})},
                           {lead}));
      Node cat = make_node(g, base + "_y_shape", "Concat",
                           {lead, patterns::int64_constant(g, base + "_cols", {n_dim})}, {y_shape});
      cat.attrs["axis"] = Attr::of_int(0);
      g.add_node(std::move(cat));
      // The MatMul's output keeps its value (and name): graph outputs and readers stay.
      g.values[y].producer = -1;
      g.add_node(make_node(g, base + "_unrows", "Reshape", {c, y_shape}, {y}));
      ++rewritten;
    }
    g.nodes[t].op_type.clear();
  }
  if (rewritten > 0) compact(g);
  return rewritten;
}

}  // namespace xpuruntime::graph::passes
