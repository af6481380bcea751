// Backward attention kernels for head dimension 64 (fp16 and bf16).
#include "backends/cuda/kernels/flash_v2/flash_launch.cuh"

namespace xpuruntime::cuda_kernels::flash {
template void run_flash_bwd<__half, 64>(const FlashBwdArgs&);
template void run_flash_bwd<__nv_bfloat16, 64>(const FlashBwdArgs&);
}  // namespace xpuruntime::cuda_kernels::flash
