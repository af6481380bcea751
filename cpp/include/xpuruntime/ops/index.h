// Attributes of the index ops (GatherND, ScatterND, ScatterElements), parsed
// once from a node: the schemas' shape inference and every device's kernels
// read them.
#pragma once

#include <cstdint>
#include <string>

#include "xpuruntime/ir.h"

namespace xpuruntime::ops {

// GatherND: the number of leading batch dimensions data and indices share.
struct GatherNDAttrs {
  int64_t batch_dims = 0;
  static GatherNDAttrs from_node(const graph::Node& n);
};

// How ScatterND / ScatterElements combine an update with the value already
// there.
enum class ScatterReduction { kNone, kAdd, kMul, kMax, kMin };

// ScatterND, ScatterElements: the reduction and (ScatterElements) the axis.
struct ScatterAttrs {
  int64_t axis = 0;
  ScatterReduction reduction = ScatterReduction::kNone;
  // Throws InvalidModelError naming the node for an unknown reduction.
  static ScatterAttrs from_node(const graph::Node& n);
};

}  // namespace xpuruntime::ops
