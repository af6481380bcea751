// Pieces the CPU GEMM kernels share: the epilogue (bias + activation) and typed
// dispatch over the four element types. Internal to cpu/matmul.
#pragma once

#include <cmath>

#include "ops/matmul/gemm_problem.h"
#include "core/half_float.h"
#include "xpuruntime/error.h"

namespace xpuruntime::matmul {

template <typename T>
inline T activate(T v, Activation act) {
  switch (act) {
    case Activation::kRelu:
      return v < T(0) ? T(0) : v;  // NaN passes through, as ONNX Relu
    case Activation::kGelu: {
      constexpr T kSqrt2OverPi = T(0.7978845608028654);
      const T inner = kSqrt2OverPi * (v + T(0.044715) * v * v * v);
      return T(0.5) * v * (T(1) + std::tanh(inner));
    }
    default:
      return v;
  }
}

// Calls f(S{}) with S the storage type of dtype (float, double, Half, BFloat16).
template <typename F>
decltype(auto) visit_float_dtype(DType t, const char* where, F&& f) {
  switch (t) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kFloat16: return f(Half{});
    case DType::kBFloat16: return f(BFloat16{});
    default:
      XRT_THROW(InvalidArgumentError, where, ": dtype ", dtype_name(t),
                " is not supported; use float32, float64, float16 or bfloat16");
  }
}

}  // namespace xpuruntime::matmul
