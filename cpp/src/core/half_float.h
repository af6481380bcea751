// IEEE binary16 and bfloat16 <-> float conversions for the CPU kernels, in
// portable C++ (no F16C requirement): round to nearest even, NaN and infinity kept,
// subnormals handled. The 16-bit types are tagged structs so overloads can tell
// them apart from uint16_t.
#pragma once

#include <bit>
#include <cstdint>

namespace xpuruntime::matmul {

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal half: normalize into a float.
    uint32_t e = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

inline uint16_t float_to_half(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or nan (keep nan quiet and non-zero)
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  }
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (absx < 0x38800000u) {  // result is subnormal or zero in half
    if (absx < 0x33000000u) return sign;  // below half the smallest subnormal
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // 14..24: aligns to the 2^-24 subnormal step
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half_ulp = 1u << (shift - 1u);
    if (rem > half_ulp || (rem == half_ulp && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t r = ((absx >> 13) - (112u << 10));
  const uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

inline float bf16_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

inline uint16_t float_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

// Uniform element access for templated kernels: to_compute<T>(s) and from_compute<S>(t).
template <typename T>
inline T to_compute(float v) { return static_cast<T>(v); }
template <typename T>
inline T to_compute(double v) { return static_cast<T>(v); }
template <typename T>
inline T to_compute(Half v) { return static_cast<T>(half_to_float(v.bits)); }
template <typename T>
inline T to_compute(BFloat16 v) { return static_cast<T>(bf16_to_float(v.bits)); }

template <typename S>
struct FromCompute {
  template <typename T>
  static S cvt(T v) { return static_cast<S>(v); }
};
template <>
struct FromCompute<Half> {
  template <typename T>
  static Half cvt(T v) { return Half{float_to_half(static_cast<float>(v))}; }
};
template <>
struct FromCompute<BFloat16> {
  template <typename T>
  static BFloat16 cvt(T v) { return BFloat16{float_to_bf16(static_cast<float>(v))}; }
};

}  // namespace xpuruntime::matmul
