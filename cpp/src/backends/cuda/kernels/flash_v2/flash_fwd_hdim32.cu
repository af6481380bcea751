// Forward attention kernels for head dimension 32 (fp16 and bf16): PVT's and Swin's
// heads. Forward only; the backward kernels take 64 and 128.
#include "backends/cuda/kernels/flash_v2/flash_launch.cuh"

namespace xpuruntime::cuda_kernels::flash {
template void run_flash_fwd<__half, 32>(const FlashFwdArgs&);
template void run_flash_fwd<__nv_bfloat16, 32>(const FlashFwdArgs&);
}  // namespace xpuruntime::cuda_kernels::flash
