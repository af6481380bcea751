// Common-subexpression elimination: a node computing what an earlier node already
// computes (same op, domain, attributes and inputs) is dropped and its readers read
// the earlier node's outputs.
//
// Why: exporters repeat work the graph could share. ALBERT's twelve layers share
// their weights, and torch exports the same attention-mask computation (an Expand
// of the mask, then Where(mask, 0, -inf)) once per layer; Swin recomputes its
// shifted-window masks per block. After constant folding those repeats are plain
// runtime nodes.
//
// Not merged: ops whose result is not a function of their inputs (the Random* ops,
// Bernoulli, Multinomial), control flow (its subgraphs are not compared), nodes with
// a tensor attribute (compared only by text, which does not identify the tensor).
// A node writing a graph output is kept (that value keeps its name), though later
// equal nodes may reuse its result.
#include <bit>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>
#include <string>
#include <tuple>

#include "graph/passes.h"

namespace xpuruntime::graph::passes {
namespace {

bool mergeable(const Node& n) {
  static const std::set<std::string> kImpure = {
      "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli",
      "Multinomial",  "If",               "Loop",          "Scan",              "Dropout"};
  if (n.inputs.empty() || kImpure.count(n.op_type)) return false;
  for (const auto& [name, a] : n.attrs)
    if (a.kind == Attr::Kind::kTensor) return false;
  return true;
}

bool writes_graph_output(const Graph& g, const Node& n) {
  for (int o : n.outputs)
    for (int go : g.outputs)
      if (o >= 0 && o == go) return true;
  return false;
}

// Everything the node's result depends on, as one comparable key.
using Key = std::tuple<std::string, std::string, std::vector<int>, std::size_t,
                       std::vector<std::pair<std::string, std::string>>>;

Key key_of(const Node& n) {
  std::vector<std::pair<std::string, std::string>> attrs;
  for (const auto& [name, a] : n.attrs) {
    std::string v = std::to_string(static_cast<int>(a.kind)) + ":";
    if (a.kind == Attr::Kind::kFloat || a.kind == Attr::Kind::kFloats) {
      // Exact bits: text() rounds to 9 digits, enough for ONNX's float32 attributes
      // but not for every double a pass may write.
      const std::vector<double> fs =
          a.kind == Attr::Kind::kFloat ? std::vector<double>{a.f} : a.floats;
      for (double f : fs) v += std::to_string(std::bit_cast<uint64_t>(f)) + ",";
    } else {
      v += a.text();
    }
    attrs.emplace_back(name, std::move(v));
  }
  return {n.op_type, n.domain, n.inputs, n.outputs.size(), std::move(attrs)};
}

}  // namespace

int eliminate_common_subexpressions(Graph& g) {
  std::map<int, int> replaced;  // value -> the equal value computed earlier
  // Equal small constants first (each layer's exporter-made scalars and shapes are
  // separate values with the same bytes): one value each, so their readers compare
  // equal. Large ones (weights) are not hashed: layers sharing weights share the
  // value already.
  constexpr std::size_t kMaxCompared = 1 << 16;
  std::map<std::tuple<int, Shape, std::string>, int> constants;
  for (std::size_t v = 0; v < g.values.size(); ++v) {
    const HostTensor& c = g.values[v].constant;
    if (!c.defined() || c.nbytes() > kMaxCompared) continue;
    std::string bytes(static_cast<const char*>(c.data), c.nbytes());
    auto [it, fresh] = constants.emplace(
        std::make_tuple(static_cast<int>(c.dtype), c.shape, std::move(bytes)), static_cast<int>(v));
    if (!fresh) replaced[static_cast<int>(v)] = it->second;
  }
  std::map<Key, int> seen;      // key -> the first node computing it
  int merged = 0;
  for (int k : g.topo_order()) {
    Node& n = g.nodes[k];
    for (int& i : n.inputs)
      if (auto it = replaced.find(i); it != replaced.end()) i = it->second;
    if (!mergeable(n)) continue;
    auto [it, fresh] = seen.emplace(key_of(n), k);
    if (fresh || writes_graph_output(g, n)) continue;  // a graph output keeps its node
    const Node& first = g.nodes[it->second];
    // An output the first node omitted but n computes: n stays (nothing to reuse).
    bool covered = true;
    for (std::size_t o = 0; o < n.outputs.size(); ++o)
      covered = covered && (n.outputs[o] < 0 || first.outputs[o] >= 0);
    if (!covered) continue;
    for (std::size_t o = 0; o < n.outputs.size(); ++o)
      if (n.outputs[o] >= 0) replaced[n.outputs[o]] = first.outputs[o];
    n.op_type.clear();
    ++merged;
  }
  compact(g);
  return merged;
}

}  // namespace xpuruntime::graph::passes
