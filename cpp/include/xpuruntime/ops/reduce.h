// Attributes of the Reduce* ops, parsed once from a node. The axes may also come
// from input 1 (ReduceSum >= 13, the others >= 18): reduce_axes() in
// xpuruntime/ops/shape_rules.h resolves them per call from these attributes and
// that input.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xpuruntime/ir.h"

namespace xpuruntime::ops {

struct ReduceAttrs {
  std::string where;          // the node, for error messages
  std::vector<int64_t> axes;  // the attribute (older opsets); empty = none given
  bool keepdims = true;
  bool noop_with_empty_axes = false;
  static ReduceAttrs from_node(const graph::Node& n);
};

}  // namespace xpuruntime::ops
