// Einsum: its equation parsed once from a node, and the labelling of one call's
// operands (ellipses expanded for the inputs' ranks) that the schema's shape
// inference and the kernels share.
#pragma once

#include <string>
#include <vector>

#include "xpuruntime/ir.h"

namespace xpuruntime::ops {

// The equation's terms as label characters; '.' stands for a whole ellipsis.
struct EinsumAttrs {
  std::vector<std::string> inputs; // one term per input
  std::string output;              // explicit ("->...") or the implicit output
  static EinsumAttrs from_node(const graph::Node &n);
};

// One call's labelling: every dimension of every operand as a label id (letters
// are their character code; the k-th ellipsis dimension, counted from the left
// of the widest ellipsis, is 256 + k), each label's extent (the broadcast of
// its dimensions: equal, or 1), and the output's labels.
struct EinsumLayout {
  std::vector<std::vector<int>> inputs;
  std::vector<int> output;
  std::vector<int64_t> extent; // by label id (size 256 + widest ellipsis)
  graph::Shape output_shape() const;
};

// Throws InvalidModelError naming the node where the operands do not fit the
// equation.
EinsumLayout einsum_layout(const graph::Node &n, const EinsumAttrs &a,
                           const std::vector<graph::Shape> &shapes);

} // namespace xpuruntime::ops
