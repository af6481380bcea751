// Attributes of the float classification ops (IsNaN has none; IsInf below),
// parsed once from a node.
#pragma once

#include "xpuruntime/ir.h"

namespace xpuruntime::ops {

// IsInf: which infinities count (both by default).
struct IsInfAttrs {
  bool negative = true;
  bool positive = true;
  static IsInfAttrs from_node(const graph::Node& n);
};

// InstanceNormalization: the variance epsilon.
struct InstanceNormAttrs {
  double epsilon = 1e-5;
  static InstanceNormAttrs from_node(const graph::Node& n);
};

}  // namespace xpuruntime::ops
