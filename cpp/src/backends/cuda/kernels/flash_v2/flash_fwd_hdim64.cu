// Forward attention kernels for head dimension 64 (fp16 and bf16).
#include "backends/cuda/kernels/flash_v2/flash_launch.cuh"

namespace xpuruntime::cuda_kernels::flash {
template void run_flash_fwd<__half, 64>(const FlashFwdArgs&);
template void run_flash_fwd<__nv_bfloat16, 64>(const FlashFwdArgs&);
}  // namespace xpuruntime::cuda_kernels::flash
