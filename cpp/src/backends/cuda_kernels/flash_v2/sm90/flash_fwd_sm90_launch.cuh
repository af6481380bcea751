// Host launcher of the Hopper forward kernel; flash_fwd_sm90_hdim*.cu
// instantiate it per head dimension (compiled for sm_90a only).
#pragma once

#include "backends/cuda_kernels/flash_v2/flash_launch.cuh"
#include "backends/cuda_kernels/flash_v2/sm90/flash_fwd_sm90.cuh"

namespace xpuruntime::cuda_kernels::flash::sm90 {

// 128 x 128 tiles for both head dimensions, one CTA per SM (up to 255 registers
// per thread). K/V buffers per kind, measured on an H200 (bf16, S=4096): 3 made
// D=128 ~4% faster than 2 (225 KB of shared memory in all; measured before the
// mbarrier pipeline), D=64 is ~3% slower with 3 than with 2.
#ifndef XRT_FLASH_SM90_STAGES_D128
#define XRT_FLASH_SM90_STAGES_D128 3
#endif
#ifndef XRT_FLASH_SM90_STAGES_D64
#define XRT_FLASH_SM90_STAGES_D64 2
#endif
template <typename T, int kD>
using FwdSm90CfgFor =
    FwdSm90Config<T, kD, 128, (kD == 128 ? XRT_FLASH_SM90_STAGES_D128 : XRT_FLASH_SM90_STAGES_D64), 1>;

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
