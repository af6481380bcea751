// Launchers of the fused LayerNorm kernels. The argument structs are the plugin's C
// ABI (xpuruntime/cuda_kernels_abi.h), shared with the binding and the KernelDefs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "xpuruntime/cuda_kernels_abi.h"

namespace xpuruntime::cuda_kernels {

void layernorm_forward(const LayerNormFwdArgs& args);
void layernorm_backward(const LayerNormBwdArgs& args);
// Bytes of fp32 workspace layernorm_backward needs for these arguments on the
// current device (pointers may still be null; null counts as aligned).
int64_t layernorm_backward_workspace_bytes(const LayerNormBwdArgs& args);

// Entry points (plugin_lookup names entry::kLayerNorm*).
KernelStatus layernorm_forward_entry(const LayerNormFwdArgs* args, char* err, std::size_t err_len) noexcept;
KernelStatus layernorm_backward_entry(const LayerNormBwdArgs* args, char* err, std::size_t err_len) noexcept;
KernelStatus layernorm_backward_workspace_entry(const LayerNormBwdArgs* args, int64_t* bytes, char* err,
                                                std::size_t err_len) noexcept;
KernelStatus layernorm_set_config_entry(const char* spec, char* err, std::size_t err_len) noexcept;
KernelStatus layernorm_describe_config_entry(KernelDType dtype, int64_t rows, int64_t cols, char* out,
                                             std::size_t out_len) noexcept;

}  // namespace xpuruntime::cuda_kernels
