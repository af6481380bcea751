// Launchers of the FlashAttention-2 kernels. The argument structs (layout, strides,
// masks, workspace) are the plugin's C ABI, declared in xpuruntime/cuda_kernels_abi.h
// so the binding and the C++ KernelDefs share one definition without CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "xpuruntime/cuda_kernels_abi.h"

namespace xpuruntime::cuda_kernels {

// Head dimensions with compiled kernels; others are rejected with a reason. The
// backward has no D = 32 kernel (its dQ split needs 32 columns per warp group).
constexpr bool flash_supports_head_dim(int d, bool backward) {
  return d == 64 || d == 128 || (d == 32 && !backward);
}

// Launchers (flash_fwd_*.cu / flash_bwd_*.cu). Throw InvalidArgumentError for a bad
// case and CudaError when a launch fails.
void flash_attention_forward(const FlashFwdArgs& args);
void flash_attention_backward(const FlashBwdArgs& args);

// Entry points (plugin_lookup names entry::kFlashForward / kFlashBackward).
KernelStatus flash_attention_forward_entry(const FlashFwdArgs* args, char* err, std::size_t err_len) noexcept;
KernelStatus flash_attention_backward_entry(const FlashBwdArgs* args, char* err,
                                            std::size_t err_len) noexcept;

}  // namespace xpuruntime::cuda_kernels
