// Binary operations a FusedElementwise program can hold (fused.cpp); the
// compiler's fusion pass (cpp/src/graph/passes.cpp) encodes programs with these.
#pragma once

#include <cstdint>

namespace xpuruntime::cpu {

enum class FusedBin : uint8_t { kAdd = 0, kSub, kMul, kDiv, kPow, kMin, kMax };

}  // namespace xpuruntime::cpu
