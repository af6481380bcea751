// Host launcher of the Hopper backward kernel; flash_bwd_sm90_hdim*.cu
// instantiate it per head dimension (compiled for sm_90a only). The caller
// (run_flash_bwd) has zeroed dq_accum and computed D = rowsum(dO * O) already.
#pragma once

#include "backends/cuda/kernels/flash_v2/flash_launch.cuh"
#include "backends/cuda/kernels/flash_v2/sm90/flash_bwd_sm90.cuh"

namespace xpuruntime::cuda_kernels::flash::sm90 {

// Query rows per step: 64 for D = 128 (dK, dV and the S^T / dP^T accumulators
// take all the registers there); D = 64 has room for 128, which halves the
// per-row cost of the barriers and the bulk reductions. Measured on an H200 (bf16,
// B=4 H=32 S=4096, backward alone, same run): 4.10 ms with 128, 4.82 with 64.
#ifndef XRT_FLASH_SM90_BWD_D64_BLOCK_M
#define XRT_FLASH_SM90_BWD_D64_BLOCK_M 128
#endif
// dK issued after dQ, overlapping the dQ hand-off (see BwdSm90Config::kDkLate).
// Measured on an H200 (bf16, B=4 S=4096, backward alone): D = 64 (H=32) 3.71 ms
// with, 4.07 without; D = 128 (H=16) 3.15-3.17 ms with, 3.10 without.
#ifndef XRT_FLASH_SM90_BWD_DK_LATE_D128
#define XRT_FLASH_SM90_BWD_DK_LATE_D128 0
#endif
#ifndef XRT_FLASH_SM90_BWD_DK_LATE_D64
#define XRT_FLASH_SM90_BWD_DK_LATE_D64 1
#endif
template <typename T, int kD>
void run_flash_bwd_sm90(const FlashBwdArgs& a) {
  using Cfg = BwdSm90Config<T, kD, (kD == 128 ? 64 : XRT_FLASH_SM90_BWD_D64_BLOCK_M),
                            (kD == 128 ? XRT_FLASH_SM90_BWD_DK_LATE_D128 : XRT_FLASH_SM90_BWD_DK_LATE_D64)
                                != 0>;
  const auto stream = static_cast<cudaStream_t>(a.stream);
  static std::atomic<uint64_t> smem_done{0};
  auto kernel = flash_bwd_sm90_kernel<Cfg>;
  ensure_smem_limit(kernel, Cfg::kSmemBytes, smem_done);
  const dim3 grid(cdiv(a.shape.seqlen_k, Cfg::kBlockN), a.shape.heads_q, a.shape.batch);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(a);
  XRT_CUDA_CHECK(cudaGetLastError());
  const int64_t chunks = static_cast<int64_t>(a.shape.batch) * a.shape.heads_q * a.shape.seqlen_q * (kD / 8);
  if (chunks > 0) {
    constexpr int kThreads = 256;
    const auto blocks = static_cast<unsigned>((chunks + kThreads - 1) / kThreads);
    flash_bwd_convert_dq_sm90<T, kD><<<blocks, kThreads, 0, stream>>>(a);
    XRT_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace xpuruntime::cuda_kernels::flash::sm90
