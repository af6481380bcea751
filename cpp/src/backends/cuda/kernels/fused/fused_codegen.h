// CUDA C++ source for a fused elementwise chain (ops::ElementwiseProgram, the
// FusedElementwise nodes the compiler creates): one kernel, `xrt_fused`, that
// walks the broadcast output once, loads each input where an instruction needs
// it, keeps the accumulator in fp32 registers and stores once. Parameters of the
// program (LeakyRelu alpha, Clip bounds, ...) are literals of the source, so each
// program is its own NVRTC compile, cached on disk (nvrtc/nvrtc_module.h).
#pragma once

#include <cstdint>
#include <string>

#include "xpuruntime/ops/elementwise_program.h"

namespace xpuruntime::cuda_ops {

inline constexpr int kFusedMaxInputs = 16;
inline constexpr int kFusedMaxRank = 8;

// The kernel's single by-value parameter; the generated source declares the same
// layout (FusedArgs in the prelude). Offsets of input k at output index i come
// from dims/strides[k] (collapsed), or i itself when all inputs are dense.
struct FusedArgs {
  const float* in[kFusedMaxInputs] = {};
  float* out = nullptr;
  int64_t numel = 0;
  int32_t rank = 0;
  int32_t all_dense = 0;
  int64_t dims[kFusedMaxRank] = {};
  int64_t strides[kFusedMaxInputs][kFusedMaxRank] = {};
};

// The program's source for `inputs` inputs (1..kFusedMaxInputs). Throws
// UnsupportedOperationError for an instruction it cannot express.
std::string fused_source(const ops::ElementwiseProgram& program, int inputs);

}  // namespace xpuruntime::cuda_ops
