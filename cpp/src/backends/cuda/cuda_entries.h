// Entry points of the CUDA plugin's own folder that plugin_lookup hands out (types
// and names in xpuruntime/cuda_kernels_abi.h): the strided copy the core's
// Tensor::copy_from uses, and the testing kernels of the GPU test suites.
#pragma once

#include <cstddef>
#include <cstdint>

#include "xpuruntime/cuda_kernels_abi.h"

namespace xpuruntime::cuda {

// entry::kStridedCopy (StridedCopyEntry): up to 8 dimensions, else kUnsupported.
cuda_kernels::KernelStatus strided_copy_entry(void* dst, const void* src, int32_t ndim, const int64_t* shape,
                                              const int64_t* dst_strides, const int64_t* src_strides,
                                              int32_t elem_size, void* stream, char* err,
                                              std::size_t err_len) noexcept;

// entry::kTestSpin / kTestAxpy / kTestErrorName: tiny kernels that create known
// device work for tests; they return a cudaError_t value (0 = success).
int32_t test_spin(double ms, void* stream) noexcept;
int32_t test_axpy(float a, const float* x, float* y, int64_t n, void* stream) noexcept;
const char* test_error_name(int32_t err) noexcept;

}  // namespace xpuruntime::cuda
