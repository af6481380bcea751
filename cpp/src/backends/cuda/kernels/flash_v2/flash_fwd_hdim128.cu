// Forward attention kernels for head dimension 128 (fp16 and bf16).
#include "backends/cuda/kernels/flash_v2/flash_launch.cuh"

namespace xpuruntime::cuda_kernels::flash {
template void run_flash_fwd<__half, 128>(const FlashFwdArgs&);
template void run_flash_fwd<__nv_bfloat16, 128>(const FlashFwdArgs&);
}  // namespace xpuruntime::cuda_kernels::flash
