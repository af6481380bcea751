// Helpers the cuBLAS and cuBLASLt providers share inside the CUDA plugin: status
// checking that throws CudaError with the call, and dtype mapping.
#pragma once

#include <cublas_v2.h>
#include <library_types.h>

#include "xpuruntime/dtype.h"
#include "xpuruntime/error.h"

namespace xpuruntime::matmul {

[[noreturn]] inline void throw_cublas_error(const char* call, cublasStatus_t st, const char* file,
                                            int line) {
  detail::throw_at<CudaError>(file, line, call, " failed: ", cublasGetStatusName(st), " (",
                              cublasGetStatusString(st), ")");
}

inline cudaDataType cuda_data_type(DType t) {
  switch (t) {
    case DType::kFloat16: return CUDA_R_16F;
    case DType::kBFloat16: return CUDA_R_16BF;
    case DType::kFloat64: return CUDA_R_64F;
    default: return CUDA_R_32F;
  }
}

}  // namespace xpuruntime::matmul

#define XRT_CUBLAS_CHECK(call)                                                    \
  do {                                                                            \
    const cublasStatus_t xrt_cublas_st_ = (call);                                 \
    if (xrt_cublas_st_ != CUBLAS_STATUS_SUCCESS) {                                \
      ::xpuruntime::matmul::throw_cublas_error(#call, xrt_cublas_st_, __FILE__, __LINE__); \
    }                                                                             \
  } while (0)
