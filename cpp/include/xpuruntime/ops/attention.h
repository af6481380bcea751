// FusedAttention (domain "xrt", dispatcher key "attention"): the scaled-dot-product
// attention subgraph the compiler recognises (graph/fusion_attention.cpp) as one op,
//
//   Y = softmax(scale · Q·Kᵀ + mask [, causal]) · V     over the last two axes,
//
// with Q [B, H, Sq, D], K [B, H, Sk, D], V [B, H, Sk, Dv] -> Y [B, H, Sq, Dv] and an
// optional additive mask (input 3) that broadcasts to [B, H, Sq, Sk]. K is given
// row-major per key (not transposed), the layout the flash_v2 kernel reads, so the
// CUDA kernel runs the node as it is. Node attributes: scale (float), is_causal
// (int: key j is hidden from query i when j > i; only with Sq == Sk) and mask_kind
// ("none" | "additive"), nan_rows_zero (int: a score row whose softmax is NaN - every key
// masked with -inf, or a NaN score - gives zeros, as the Where(IsNaN(P), 0, P) guard of
// torch's SDPA export computes); the names are those flash_v2 reads from an OpContext. The
// mask has the query's dtype or float32 (what flash_v2 reads for 16-bit queries).
// "_bshd" (int bit mask, default 0): Q (1), K (2), V (4) and the output (8) are given
// as [B, S, H, D] instead, the layout the projections produce before the head
// transpose; the compiler sets it where the kernel reads those strides
// (fusion_attention_layout.cpp), so the exported Transposes around attention vanish.
#pragma once

#include <map>
#include <string>

#include "xpuruntime/ir.h"

namespace xpuruntime::ops {

struct AttentionAttrs {
  enum class Mask { kNone, kAdditive };
  double scale = 1.0;
  bool causal = false;
  Mask mask = Mask::kNone;
  bool nan_rows_zero = false;
  int bshd = 0;  // kBshd* bits
  static constexpr int kBshdQ = 1, kBshdK = 2, kBshdV = 4, kBshdOut = 8;

  // Throws InvalidModelError naming the node for a mask_kind other than the two.
  static AttentionAttrs from_node(const graph::Node& n);
  void to_attrs(std::map<std::string, graph::Attr>& attrs) const;
  static const char* mask_name(Mask m) { return m == Mask::kAdditive ? "additive" : "none"; }
};

}  // namespace xpuruntime::ops
