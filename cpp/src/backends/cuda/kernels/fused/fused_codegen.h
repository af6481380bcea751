// CUDA C++ source for a fused elementwise chain (ops::ElementwiseProgram, the
// FusedElementwise nodes the compiler creates): a kernel that walks the broadcast
// output once, loads each input where an instruction needs
// it, keeps the accumulator in fp32 registers and stores once. Inputs and output
// share one element type (float32, float16 or bfloat16: loads widen to fp32 and the
// store rounds once, so a chain rounds once where its unfused ops rounded each step). Parameters of
// the program (LeakyRelu alpha, Clip bounds, ...) are literals of the source, so each program is
// its own NVRTC compile, cached on disk (nvrtc/nvrtc_module.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xpuruntime/dtype.h"
#include "xpuruntime/ops/elementwise_program.h"

namespace xpuruntime::cuda_ops {

inline constexpr int kFusedMaxInputs = 16;
inline constexpr int kFusedMaxRank = 8;

// The kernel's single by-value parameter; the generated source declares the same
// layout (FusedArgs in the prelude). Offsets of input k at output index i come
// from dims/strides[k] (collapsed), or i itself when all inputs are dense.
struct FusedArgs {
  const void* in[kFusedMaxInputs] = {};  // elements of the program's dtype
  void* out = nullptr;
  int64_t numel = 0;
  int32_t rank = 0;
  int32_t all_dense = 0;
  int64_t dims[kFusedMaxRank] = {};
  int64_t strides[kFusedMaxInputs][kFusedMaxRank] = {};
};

// The vector kernels' parameter (FusedVecArgs in the generated prelude): the output
// collapsed to `rank` dims whose innermost one counts groups of V elements; `nvec`
// groups in all (< 2^31, so 32-bit offsets and divisions by magic numbers hold:
// q = (umulhi(n, mul) + n) >> shr, common/broadcast.h's FastDivisor).
// Input k reads V elements with one access where bit k of dense_mask is set (it walks
// the innermost dimension; its innermost stride is then V) and one broadcast element
// otherwise (stride 0).
struct FusedVecArgs {
  const void* in[kFusedMaxInputs] = {};
  void* out = nullptr;
  uint32_t nvec = 0;
  int32_t rank = 0;
  uint32_t dense_mask = 0;
  uint32_t div[kFusedMaxRank] = {};
  uint32_t mul[kFusedMaxRank] = {};
  uint32_t shr[kFusedMaxRank] = {};
  uint32_t strides[kFusedMaxInputs][kFusedMaxRank] = {};
};

// The group widths V the source has a vector kernel for (widest first), and the
// kernel's name for one of them.
std::vector<int> fused_vector_widths(DType dtype);
std::string fused_vector_kernel(int width);

// Whether the generated kernel takes tensors of this dtype.
bool fused_dtype_supported(DType dtype);
// The program's source for `inputs` inputs (1..kFusedMaxInputs) of `dtype`: the
// general kernel `xrt_fused` and one vector kernel per fused_vector_widths(dtype). Throws
// UnsupportedOperationError for an instruction it cannot express or another dtype.
std::string fused_source(const ops::ElementwiseProgram& program, int inputs,
                         DType dtype = DType::kFloat32);

}  // namespace xpuruntime::cuda_ops
