// Helpers the CPU op kernel tests share.
#pragma once

#include <cstddef>
#include <random>
#include <vector>

namespace xpuruntime::test {

// n standard-normal floats from a fixed seed (reproducible failures).
inline std::vector<float> randn(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace xpuruntime::test
