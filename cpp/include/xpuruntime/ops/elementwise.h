// Elementwise op kinds every device agrees on: the unary kinds (activations and
// math functions) with their parameters, and the binary operations a fused
// elementwise chain may hold. Devices map a kind to their own code; the fusion
// pass describes fused chains with them.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "xpuruntime/ir.h"

namespace xpuruntime::ops {

// clang-format off
enum class Unary : uint8_t {
  kIdentity, kNeg, kAbs, kSqrt, kExp, kLog, kErf, kTanh, kSigmoid, kRelu, kLeakyRelu,
  kHardSigmoid, kHardSwish, kGelu, kGeluTanh, kReciprocal, kClip, kFloor, kCeil, kRound,
  kSin, kCos, kSoftplus, kSign, kElu, kNot
};
// clang-format on

// Parameters some unary ops take (alpha, beta, clip bounds).
struct UnaryParams {
  double alpha = 0.0;
  double beta = 0.0;
  double lo = -INFINITY;
  double hi = INFINITY;
};

// Unary kind of an ONNX op type (Gelu resolves its `approximate` attribute);
// returns false when op_type is not a unary elementwise op. Clip is not one here
// (its bounds may be inputs).
bool unary_kind(const graph::Node& n, Unary& kind);
// The op types unary_kind() knows, except Not (schema order).
const std::vector<std::string>& unary_op_types();
// The attribute parameters of a unary op (LeakyRelu/Elu alpha, HardSigmoid alpha
// and beta); defaults as ONNX gives them.
UnaryParams unary_params(const graph::Node& n, Unary kind);

// Binary operations a fused elementwise chain can hold.
enum class FusedBin : uint8_t { kAdd = 0, kSub, kMul, kDiv, kPow, kMin, kMax };

}  // namespace xpuruntime::ops
