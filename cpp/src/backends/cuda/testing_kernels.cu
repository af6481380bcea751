// Tiny kernels the GPU test suites use to create known device work: a busy-wait
// of a given duration (for stream/event timing and cross-stream ordering) and an
// axpy (for graph capture/replay results). Tests reach them through
// plugin_lookup("cuda", "test_spin" | "test_axpy" | "test_error_name") without
// linking CUDA themselves. They return a cudaError_t value (0 = success).
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_entries.h"

namespace {

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(uint64_t ns) {
  const uint64_t start = global_ns();
  while (global_ns() - start < ns) {
    __nanosleep(1000);
  }
}

__global__ void axpy_kernel(float a, const float* __restrict__ x, float* __restrict__ y,
                            int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    y[i] = __fmaf_rn(a, x[i], y[i]);  // one rounding: tests compare to std::fma
  }
}

}  // namespace

namespace xpuruntime::cuda {

// Occupies `stream` for `ms` milliseconds of wall time (one thread, one block).
int32_t test_spin(double ms, void* stream) noexcept {
  if (ms < 0) return static_cast<int>(cudaErrorInvalidValue);
  spin_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<uint64_t>(ms * 1e6));
  return static_cast<int>(cudaGetLastError());
}

// y[i] = fma(a, x[i], y[i]) for i < n, on `stream`.
int32_t test_axpy(float a, const float* x, float* y, int64_t n, void* stream) noexcept {
  if (n < 0) return static_cast<int>(cudaErrorInvalidValue);
  if (n == 0) return 0;
  const int threads = 256;
  const int64_t blocks64 = (n + threads - 1) / threads;
  const int blocks = static_cast<int>(blocks64 < 4096 ? blocks64 : 4096);
  axpy_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(a, x, y, n);
  return static_cast<int>(cudaGetLastError());
}

// The name of a cudaError_t value returned above ("cudaErrorInvalidValue").
const char* test_error_name(int32_t err) noexcept {
  return cudaGetErrorName(static_cast<cudaError_t>(err));
}

}  // namespace xpuruntime::cuda
