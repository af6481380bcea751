// Attributes of the data-movement ops, parsed once from a node: the schemas'
// shape inference and every device's kernels read them here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xpuruntime/ir.h"

namespace xpuruntime::ops {

// Concat, Split, Gather, GatherElements: the one axis (default 0; may be negative).
struct AxisAttrs {
  int64_t axis = 0;
  static AxisAttrs from_node(const graph::Node& n);
};

// Pad: mode, the pads attribute (opset < 11; later from input 1) and the constant
// value attribute (opset < 11; later input 2).
struct PadAttrs {
  std::string mode = "constant";  // constant, reflect, edge, wrap
  std::vector<int64_t> pads;
  double value = 0.0;
  // Throws InvalidModelError naming the node for an unknown mode.
  static PadAttrs from_node(const graph::Node& n);
};

struct CumSumAttrs {
  bool exclusive = false;
  bool reverse = false;
  static CumSumAttrs from_node(const graph::Node& n);
};

struct TriluAttrs {
  bool upper = true;
  static TriluAttrs from_node(const graph::Node& n);
};

}  // namespace xpuruntime::ops
