// Branch-free float32 exp/tanh/erf/sigmoid that GCC vectorizes (SSE2 baseline),
// used by the activation kernels where libm calls would dominate (GELU over
// 128×3072 BERT activations). Accuracy, checked against double-precision libm in
// tests/cpp/test_cpu_ops.cpp (inf and NaN: tests/python/test_hardening_semantics.py): exp ≤ 2 ulp
// over [-87, 88], +inf above 88.72, 0 below -103.97, NaN for NaN; tanh, sigmoid ≤ 3e-7 absolute;
// erf ≤ 4e-7 absolute over every float, ≤ 3e-7 relative below 0.5.
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
  // x·P(x²)/Q(x²) on [-4, 4], a rational fit (weighted least squares iterated to
  // near-minimax: 7e-8 in exact arithmetic) with no exp and one division: 2.4x
  // faster than an erfc-through-exp form at 512 bits. Past |x| = 4, erf rounds to ±1
  // in float (erfc(4) = 1.5e-8), so x is clamped there and the result to [-1, 1].
  // Float rounding makes the worst error over every float 3.9e-7 absolute (near
  // |x| = 3.5, 6 ulp of 1; 3.6e-7 where FMA contracts the Horner steps) and 2.8e-7
  // relative below 0.5, tiny and subnormal x included. NaN passes (the clamps return
  // their first argument).
  const float xc = std::min(std::max(x, -4.0f), 4.0f);
  const float s = xc * xc;
  float p = 2.054480773949763e-06f;
  p = p * s + 2.8360297437757254e-04f;
  p = p * s + 3.715135622769594e-03f;
  p = p * s + 5.258152633905411e-02f;
  p = p * s + 1.892324537038803e-01f;
  p = p * s + 1.1283791065216064f;
  float q = 3.8077218050602823e-05f;
  q = q * s + 1.1503008427098393e-03f;
  q = q * s + 1.4864237979054451e-02f;
  q = q * s + 1.1361374706029892e-01f;
  q = q * s + 5.010356903076172e-01f;
  q = q * s + 1.0f;
  const float r = xc * p / q;
  return std::min(std::max(r, -1.0f), 1.0f);
}

}  // namespace xpuruntime::cpu
