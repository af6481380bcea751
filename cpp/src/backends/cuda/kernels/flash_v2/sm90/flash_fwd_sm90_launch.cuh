// Host launcher of the Hopper forward kernel; flash_fwd_sm90_hdim*.cu
// instantiate it per head dimension (compiled for sm_90a only).
#pragma once

#include <type_traits>

#include "backends/cuda/kernels/flash_v2/flash_launch.cuh"
#include "backends/cuda/kernels/flash_v2/sm90/flash_fwd_sm90.cuh"

namespace xpuruntime::cuda_kernels::flash::sm90 {

// D=128: 128 x 128 tiles, one CTA per SM (up to 255 registers per thread) and 3
// K/V buffers per kind (measured on an H200, bf16, S=4096: ~4% faster than 2; 225 KB
// of shared memory in all).
// D=64: 128 query x 64 key tiles, 3 buffers, two CTAs per SM (at most 128 registers
// per thread, 67 KB of shared memory each), so four warpgroups share the tensor
// cores and one CTA's softmax hides behind another's products. Measured on an H200
// (bf16, ops.fused_attention, median of 30): against 128 x 128 tiles with 2 buffers
// and one CTA per SM, 350 vs 333 TFLOP/s at B=4 H=16 S=4096 non-causal, 291 vs 278
// causal, 0.101 vs 0.106 ms per call at B=8 H=12 S=1024 causal (GPT-2 small);
// 128 x 128 tiles at two CTAs per SM spill wgmma registers (305 / 256 TFLOP/s).
// (benchmarks/results/flash_fwd_d64_sweep_NVIDIA_H200.json, six configurations.)
#ifndef XRT_FLASH_SM90_STAGES_D128
#define XRT_FLASH_SM90_STAGES_D128 3
#endif
#ifndef XRT_FLASH_SM90_STAGES_D64
#define XRT_FLASH_SM90_STAGES_D64 3
#endif
#ifndef XRT_FLASH_SM90_BLOCK_N_D64
#define XRT_FLASH_SM90_BLOCK_N_D64 64
#endif
#ifndef XRT_FLASH_SM90_CTAS_PER_SM_D64
#define XRT_FLASH_SM90_CTAS_PER_SM_D64 2
#endif
template <typename T, int kD>
using FwdSm90CfgFor =
    std::conditional_t<kD == 128, FwdSm90Config<T, 128, 128, XRT_FLASH_SM90_STAGES_D128, 1>,
                       FwdSm90Config<T, kD, XRT_FLASH_SM90_BLOCK_N_D64, XRT_FLASH_SM90_STAGES_D64,
                                     XRT_FLASH_SM90_CTAS_PER_SM_D64>>;

template <typename T, int kD>
void run_flash_fwd_sm90(const FlashFwdArgs& a) {
  using Cfg = FwdSm90CfgFor<T, kD>;
  static std::atomic<uint64_t> smem_done{0};
  auto kernel = flash_fwd_sm90_kernel<Cfg>;
  ensure_smem_limit(kernel, Cfg::kSmemBytes, smem_done);
  const dim3 grid(cdiv(a.shape.seqlen_q, Cfg::kBlockM), a.shape.heads_q, a.shape.batch);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, static_cast<cudaStream_t>(a.stream)>>>(a);
  XRT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace xpuruntime::cuda_kernels::flash::sm90
