// KernelDefs of the plugin's own attention, LayerNorm and column-sum kernels, so the
// Dispatcher can choose them and list_kernels() shows them:
//   op "attention", kernel "flash_v2"        (FlashAttention-2 forward)
//   op "layernorm", kernel "fused_layernorm" (LayerNorm forward)
//   op "column_sums", kernel "column_sums"   (a linear layer's bias gradient)
// Their supports() hold the checks the torch routing made in Python (dtype, head
// dimension, capability, layout), with kernel_registry.h reason codes.
#pragma once

namespace xpuruntime {
class KernelRegistry;
}  // namespace xpuruntime

namespace xpuruntime::cuda_kernels {

void register_cuda_kernel_defs(KernelRegistry& registry);

}  // namespace xpuruntime::cuda_kernels
