// Unary elementwise kernels: one grid-stride kernel per (op, dtype), 16-byte
// vector loads where the pointers allow, fp32 math for the 16-bit floats.
#include <cmath>

#include "backends/cuda/kernels/common/device_types.cuh"
#include "backends/cuda/kernels/elementwise/elementwise_impl.h"

namespace xpuruntime::cuda_ops {
namespace {

template <UnaryOp K, typename C>
__device__ __forceinline__ C unary_apply(C x, double alpha, double beta) {
  constexpr bool kFloat = std::is_floating_point_v<C>;
  if constexpr (K == UnaryOp::kIdentity) {
    return x;
  } else if constexpr (K == UnaryOp::kNeg || K == UnaryOp::kAbs) {
    if constexpr (std::is_integral_v<C>) {
      // Two's complement wrap (INT_MIN stays INT_MIN, as numpy and the CPU kernel).
      using U = std::make_unsigned_t<C>;
      const C neg = static_cast<C>(static_cast<U>(U(0) - static_cast<U>(x)));
      return K == UnaryOp::kNeg || x < C(0) ? neg : x;
    } else {
      return K == UnaryOp::kNeg ? -x : std::fabs(x);
    }
  } else if constexpr (K == UnaryOp::kRelu) {
    return x < C(0) ? C(0) : x;  // NaN passes through
  } else if constexpr (K == UnaryOp::kSign) {
    return x > C(0) ? C(1) : (x < C(0) ? C(-1) : x);  // 0 -> 0, NaN -> NaN
  } else if constexpr (K == UnaryOp::kNot) {
    return !x;
  } else if constexpr (kFloat) {
    if constexpr (K == UnaryOp::kSqrt) return std::sqrt(x);
    if constexpr (K == UnaryOp::kExp) return std::exp(x);
    if constexpr (K == UnaryOp::kLog) return std::log(x);
    if constexpr (K == UnaryOp::kErf) return std::erf(x);
    if constexpr (K == UnaryOp::kTanh) return std::tanh(x);
    if constexpr (K == UnaryOp::kSigmoid) return C(1) / (C(1) + std::exp(-x));
    if constexpr (K == UnaryOp::kLeakyRelu) return x < C(0) ? static_cast<C>(alpha) * x : x;
    if constexpr (K == UnaryOp::kHardSigmoid) {
      const C v = static_cast<C>(alpha) * x + static_cast<C>(beta);
      return v < C(0) ? C(0) : (v > C(1) ? C(1) : v);
    }
    if constexpr (K == UnaryOp::kHardSwish) {
      const C v = x / C(6) + C(0.5);
      return x * (v < C(0) ? C(0) : (v > C(1) ? C(1) : v));
    }
    if constexpr (K == UnaryOp::kGelu)
      return C(0.5) * x * (C(1) + std::erf(x * C(0.70710678118654752)));
    if constexpr (K == UnaryOp::kGeluTanh) {
      return C(0.5) * x * (C(1) + std::tanh(C(0.7978845608028654) * (x + C(0.044715) * x * x * x)));
    }
    if constexpr (K == UnaryOp::kReciprocal) return C(1) / x;
    if constexpr (K == UnaryOp::kFloor) return std::floor(x);
    if constexpr (K == UnaryOp::kCeil) return std::ceil(x);
    if constexpr (K == UnaryOp::kRound) return std::rint(x);  // half to even, as ONNX
    if constexpr (K == UnaryOp::kSin) return std::sin(x);
    if constexpr (K == UnaryOp::kCos) return std::cos(x);
    if constexpr (K == UnaryOp::kSoftplus) return x > C(20) ? x : std::log1p(std::exp(x));
    if constexpr (K == UnaryOp::kElu) return x < C(0) ? static_cast<C>(alpha) * (std::expm1(x)) : x;
    if constexpr (K == UnaryOp::kPowScalar) {
      const C e = static_cast<C>(alpha);
      if (e == C(2)) return x * x;  // the common exponents exactly (variance's x^2, GELU's x^3)
      if (e == C(3)) return x * x * x;
      if (e == C(0.5)) return std::sqrt(x);
      return std::pow(x, e);
    }
  }
  return x;
}

template <UnaryOp K, typename T>
__global__ void unary_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, double alpha,
                             double beta, bool vec) {
  using C = compute_t<T>;
  constexpr int kV = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t head = 0;
  if (vec) {
    // 16-byte loads and stores over the aligned body; the tail below.
    struct alignas(16) V {
      T v[kV];
    };
    const int64_t nv = n / kV;
    const V* xv = reinterpret_cast<const V*>(x);
    V* yv = reinterpret_cast<V*>(y);
    for (int64_t i = tid; i < nv; i += stride) {
      V a = xv[i], b;
#pragma unroll
      for (int j = 0; j < kV; ++j) b.v[j] = store<T>(unary_apply<K, C>(load(a.v[j]), alpha, beta));
      yv[i] = b;
    }
    head = nv * kV;
  }
  for (int64_t i = head + tid; i < n; i += stride)
    y[i] = store<T>(unary_apply<K, C>(load(x[i]), alpha, beta));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <UnaryOp K, TypeSet S>
void unary_typed(DType t, const UnaryParams& p, const void* x, void* y, int64_t n, cudaStream_t s) {
  visit_dtype<S>(t, "unary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool vec = aligned16(x) && aligned16(y) && sizeof(T) < 16;
    const int threads = 256;
    unary_kernel<K, T><<<grid_for(n, threads, vec ? 16 / sizeof(T) : 1), threads, 0, s>>>(
        static_cast<const T*>(x), static_cast<T*>(y), n, p.alpha, p.beta, vec);
    XRT_CUDA_LAUNCH_CHECK();
  });
}

template <typename T>
__global__ void clip_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, const T* lo_p,
                            const T* hi_p, double lo_d, double hi_d) {
  using C = compute_t<T>;
  const C lo = lo_p != nullptr ? load(*lo_p) : static_cast<C>(lo_d);
  const C hi = hi_p != nullptr ? load(*hi_p) : static_cast<C>(hi_d);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    // min(max(v, lo), hi) as numpy and the ONNX reference: hi wins when lo > hi.
    // NaN passes through (both comparisons are false).
    const C v = load(x[i]);
    const C a = v < lo ? lo : v;
    y[i] = store<T>(a > hi ? hi : a);
  }
}

}  // namespace

void launch_unary(UnaryOp op, DType t, const UnaryParams& p, const void* x, void* y, int64_t n,
                  void* stream) {
  if (n <= 0) return;
  cudaStream_t s = as_stream(stream);
  switch (op) {
    // clang-format off
#define XRT_U(K, S) \
  case UnaryOp::K: return unary_typed<UnaryOp::K, TypeSet::S>(t, p, x, y, n, s);
    XRT_U(kNeg, kSigned)
    XRT_U(kAbs, kSigned)
    XRT_U(kRelu, kSigned)
    XRT_U(kSign, kSigned)
    XRT_U(kSqrt, kFloat)
    XRT_U(kExp, kFloat)
    XRT_U(kLog, kFloat)
    XRT_U(kErf, kFloat)
    XRT_U(kTanh, kFloat)
    XRT_U(kSigmoid, kFloat)
    XRT_U(kLeakyRelu, kFloat)
    XRT_U(kHardSigmoid, kFloat)
    XRT_U(kHardSwish, kFloat)
    XRT_U(kGelu, kFloat)
    XRT_U(kGeluTanh, kFloat)
    XRT_U(kReciprocal, kFloat)
    XRT_U(kFloor, kFloat)
    XRT_U(kCeil, kFloat)
    XRT_U(kRound, kFloat)
    XRT_U(kSin, kFloat)
    XRT_U(kCos, kFloat)
    XRT_U(kSoftplus, kFloat)
    XRT_U(kElu, kFloat)
    XRT_U(kPowScalar, kFloat)
    XRT_U(kIdentity, kAll)
#undef XRT_U
    // clang-format on
    case UnaryOp::kNot:
      return visit_dtype<TypeSet::kAll>(t, "Not", [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_same_v<T, bool>) {
          unary_kernel<UnaryOp::kNot, bool><<<grid_for(n, 256, 16), 256, 0, s>>>(
              static_cast<const bool*>(x), static_cast<bool*>(y), n, 0.0, 0.0,
              aligned16(x) && aligned16(y));
          XRT_CUDA_LAUNCH_CHECK();
        } else {
          XRT_THROW(UnsupportedOperationError, "Not (cuda) takes bool, got ", dtype_name(t));
        }
      });
  }
}

void launch_clip(DType t, const void* x, void* y, int64_t n, const void* lo_ptr, const void* hi_ptr,
                 double lo, double hi, void* stream) {
  if (n <= 0) return;
  visit_dtype<TypeSet::kNumeric>(t, "Clip", [&](auto tag) {
    using T = typename decltype(tag)::type;
    clip_kernel<T><<<grid_for(n, 256), 256, 0, as_stream(stream)>>>(
        static_cast<const T*>(x), static_cast<T*>(y), n, static_cast<const T*>(lo_ptr),
        static_cast<const T*>(hi_ptr), lo, hi);
    XRT_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace xpuruntime::cuda_ops
