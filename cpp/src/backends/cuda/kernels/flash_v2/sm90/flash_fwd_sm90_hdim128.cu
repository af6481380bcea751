// Hopper (sm_90a, wgmma) forward attention for head dimension 128 (fp16 and bf16).
#include "backends/cuda/kernels/flash_v2/sm90/flash_fwd_sm90_launch.cuh"

namespace xpuruntime::cuda_kernels::flash::sm90 {
template void run_flash_fwd_sm90<__half, 128>(const FlashFwdArgs&);
template void run_flash_fwd_sm90<__nv_bfloat16, 128>(const FlashFwdArgs&);
}  // namespace xpuruntime::cuda_kernels::flash::sm90
