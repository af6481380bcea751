// Branch-free float32 exp/tanh/erf/sigmoid that GCC vectorizes (SSE2 baseline),
// used by the activation kernels where libm calls would dominate (GELU over
// 128×3072 BERT activations). Accuracy, checked against double-precision libm in
// tests/cpp/test_cpu_ops.cpp (inf and NaN: tests/python/test_hardening_semantics.py): exp ≤ 2 ulp
// over [-87, 88], +inf above 88.72, 0 below -103.97, NaN for NaN; tanh, sigmoid ≤ 3e-7 absolute;
// erf ≤ 3e-7 absolute.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

namespace xpuruntime::cpu {

inline float fast_exp(float x) {
  // Clamp to [-104, 89] (NaN passes: std::max/min return their first argument then).
  // 89 makes the result overflow to +inf and -104 underflow to 0 exactly where float
  // exp does (88.72, -103.97); in between, the two scale factors below stay normal
  // and the product rounds into the subnormals.
  x = std::min(std::max(x, -104.0f), 89.0f);
  const float t = x * 1.44269504088896341f;
  // Round to nearest with the 1.5·2^23 trick (branch-free, vectorizes on SSE2); the
  // integer is read from the sum's low mantissa bits, not converted, so a NaN gives
  // some integer (the result is NaN through r) and never an out-of-range conversion.
  const float biased = t + 12582912.0f;
  const float fi = biased - 12582912.0f;
  const int ni = std::bit_cast<int>(biased) - std::bit_cast<int>(12582912.0f);
  // Cody-Waite reduction: r = x - fi*ln2 in two steps.
  float r = x - fi * 0.693359375f;
  r = r + fi * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  // 2^ni; ni is in [-150, 128] here (any int for NaN: unsigned arithmetic below),
  // folded into two normal factors.
  const int e1 = ni / 2;
  const int e2 = ni - e1;
  float s1 = std::bit_cast<float>(static_cast<uint32_t>(e1 + 127) << 23);
  float s2 = std::bit_cast<float>(static_cast<uint32_t>(e2 + 127) << 23);
  return y * s1 * s2;
}

inline float fast_tanh(float x) {
  float ax = x < 0.0f ? -x : x;
  // Past 10 the result is ±1 exactly (as float tanh is from 9.01 on); the clamp keeps
  // exp finite. NaN passes (the comparisons are false).
  ax = ax > 10.0f ? 10.0f : ax;
  // Large |x|: 1 - 2/(e^{2|x|}+1); small |x|: odd minimax polynomial (cephes).
  float big = 1.0f - 2.0f / (fast_exp(2.0f * ax) + 1.0f);
  float z = x * x;
  float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                  1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
  float sb = x < 0.0f ? -big : big;
  return ax < 0.625f ? small : sb;
}

inline float fast_sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }

inline float fast_erf(float x) {
  // erfc(|x|) with fractional error < 1.2e-7 (Numerical Recipes' Chebyshev fit).
  float z = x < 0.0f ? -x : x;
  float t = 1.0f / (1.0f + 0.5f * z);
  float p = -1.26551223f +
            t * (1.00002368f +
                 t * (0.37409196f +
                      t * (0.09678418f +
                           t * (-0.18628806f +
                                t * (0.27886807f +
                                     t * (-1.13520398f +
                                          t * (1.48851587f +
                                               t * (-0.82215223f + t * 0.17087277f))))))));
  float erfc = t * fast_exp(-z * z + p);
  float r = 1.0f - erfc;
  return x < 0.0f ? -r : r;
}

}  // namespace xpuruntime::cpu
