// Scalar definitions of the unary elementwise ops, shared by the unary kernels and
// the fused elementwise kernel (so a fused chain computes exactly what the
// unfused ops compute), and the dtype conversion shared with Cast.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "backends/cpu/kernels/cpu_op.h"
#include "backends/cpu/kernels/fastmath.h"
#include "xpuruntime/ops/elementwise.h"

namespace xpuruntime::cpu {

// Converts n elements between dtypes (float→int saturates, NaN→0; →bool is != 0).
void cast_elements(DType from, const void* src, DType to, void* dst, int64_t n);

using ops::unary_kind;
using ops::unary_params;
using ops::Unary;
using ops::UnaryParams;

// A Clip bound (held as double) in the element type. For integers it saturates to
// the type's range and a NaN bound means no bound: a plain cast of a value outside
// the range (the int64 default bound 2^63, an attribute of 1e30) is undefined.
template <typename C>
inline C bound_as(double v, bool upper) {
  if constexpr (std::is_integral_v<C>) {
    if (std::isnan(v)) return upper ? std::numeric_limits<C>::max() : std::numeric_limits<C>::min();
  }
  return saturate_to<C>(v);
}

template <Unary K, typename C>
inline __attribute__((always_inline)) C apply_unary_k(C x, const UnaryParams& p) {
  constexpr bool kF32 = std::is_same_v<C, float>;
  switch (K) {
    case Unary::kIdentity: return x;
    case Unary::kNeg:
    case Unary::kAbs:
      if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
        // Two's complement wrap (INT_MIN stays INT_MIN, as in numpy), never UB.
        using U = std::make_unsigned_t<C>;
        const C neg = static_cast<C>(static_cast<U>(U(0) - static_cast<U>(x)));
        return K == Unary::kNeg || x < C(0) ? neg : x;
      } else {
        return K == Unary::kNeg || x < C(0) ? static_cast<C>(-x) : x;
      }
    case Unary::kSqrt: return static_cast<C>(std::sqrt(x));
    case Unary::kExp:
      if constexpr (kF32) return fast_exp(x);
      else return static_cast<C>(std::exp(x));
    case Unary::kLog: return static_cast<C>(std::log(x));
    case Unary::kErf:
      if constexpr (kF32) return fast_erf(x);
      else return static_cast<C>(std::erf(x));
    case Unary::kTanh:
      if constexpr (kF32) return fast_tanh(x);
      else return static_cast<C>(std::tanh(x));
    case Unary::kSigmoid:
      if constexpr (kF32) return fast_sigmoid(x);
      else return static_cast<C>(1.0 / (1.0 + std::exp(-static_cast<double>(x))));
    // NaN passes through (ONNX/numpy: maximum(NaN, 0) is NaN); x < 0 ? 0 : x is one
    // ordered compare (maxps with x second), as fast as the x > 0 ? x : 0 it replaces.
    case Unary::kRelu: return x < C(0) ? C(0) : x;
    case Unary::kLeakyRelu: return x >= C(0) ? x : static_cast<C>(x * static_cast<C>(p.alpha));
    case Unary::kHardSigmoid: {
      C v = static_cast<C>(static_cast<C>(p.alpha) * x + static_cast<C>(p.beta));
      return v < C(0) ? C(0) : (v > C(1) ? C(1) : v);
    }
    case Unary::kHardSwish: {
      C v = static_cast<C>(x / C(6) + C(0.5));
      v = v < C(0) ? C(0) : (v > C(1) ? C(1) : v);
      return static_cast<C>(x * v);
    }
    case Unary::kGelu:
      if constexpr (kF32) return 0.5f * x * (1.0f + fast_erf(x * 0.70710678118654752f));
      else return static_cast<C>(0.5 * x * (1.0 + std::erf(x * 0.70710678118654752)));
    case Unary::kGeluTanh: {
      if constexpr (kF32) {
        return 0.5f * x * (1.0f + fast_tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
      } else {
        double d = static_cast<double>(x);
        return static_cast<C>(0.5 * d * (1.0 + std::tanh(0.7978845608028654 * (d + 0.044715 * d * d * d))));
      }
    }
    case Unary::kReciprocal: return static_cast<C>(C(1) / x);
    case Unary::kClip: {
      const C lo = bound_as<C>(p.lo, false), hi = bound_as<C>(p.hi, true);
      C v = x < lo ? lo : x;
      return v > hi ? hi : v;
    }
    case Unary::kFloor: return static_cast<C>(std::floor(x));
    case Unary::kCeil: return static_cast<C>(std::ceil(x));
    case Unary::kRound: return static_cast<C>(std::nearbyint(x));
    case Unary::kSin: return static_cast<C>(std::sin(x));
    case Unary::kCos: return static_cast<C>(std::cos(x));
    case Unary::kSoftplus: {
      double d = static_cast<double>(x);
      return static_cast<C>(d > 20 ? d : std::log1p(std::exp(d)));
    }
    case Unary::kSign: return x > C(0) ? C(1) : (x < C(0) ? C(-1) : x);  // ±0, NaN: x
    case Unary::kElu:
      return x >= C(0) ? x : static_cast<C>(p.alpha * (std::exp(static_cast<double>(x)) - 1.0));
    case Unary::kNot: return static_cast<C>(!x);
  }
  return x;
}

// The same with the kind chosen at run time (one switch per element: use the
// template above in loops).
template <typename C>
inline C apply_unary(Unary k, C x, const UnaryParams& p) {
  switch (k) {
#define XRT_UNARY_APPLY(K) \
  case Unary::K: return apply_unary_k<Unary::K, C>(x, p);
    XRT_UNARY_APPLY(kIdentity) XRT_UNARY_APPLY(kNeg) XRT_UNARY_APPLY(kAbs) XRT_UNARY_APPLY(kSqrt)
    XRT_UNARY_APPLY(kExp) XRT_UNARY_APPLY(kLog) XRT_UNARY_APPLY(kErf) XRT_UNARY_APPLY(kTanh)
    XRT_UNARY_APPLY(kSigmoid) XRT_UNARY_APPLY(kRelu) XRT_UNARY_APPLY(kLeakyRelu)
    XRT_UNARY_APPLY(kHardSigmoid) XRT_UNARY_APPLY(kHardSwish) XRT_UNARY_APPLY(kGelu)
    XRT_UNARY_APPLY(kGeluTanh) XRT_UNARY_APPLY(kReciprocal) XRT_UNARY_APPLY(kClip)
    XRT_UNARY_APPLY(kFloor) XRT_UNARY_APPLY(kCeil) XRT_UNARY_APPLY(kRound) XRT_UNARY_APPLY(kSin)
    XRT_UNARY_APPLY(kCos) XRT_UNARY_APPLY(kSoftplus) XRT_UNARY_APPLY(kSign) XRT_UNARY_APPLY(kElu)
    XRT_UNARY_APPLY(kNot)
#undef XRT_UNARY_APPLY
  }
  return x;
}

// y[i] = f(x[i]) over n elements of dtype t (parallel above the grain size).
void run_unary(Unary k, const UnaryParams& p, DType t, const void* x, void* y, int64_t n);

}  // namespace xpuruntime::cpu
