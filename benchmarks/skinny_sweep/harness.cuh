// Shared pieces of the skinny-GEMM tuning harnesses (skinny_sweep.cu,
// stream_sweep.cu, tma_sweep.cu, bw_probe.cu; none is part of the build): a
// checked-call macro, a deterministic fp16 fill, GPU time per call from a CUDA
// graph, the cuBLAS reference GEMM and the relative error against it.
#pragma once

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                       \
  do {                                                              \
    auto e_ = (x);                                                  \
    if (e_ != 0) {                                                  \
      std::printf("FAIL %s = %d line %d\n", #x, (int)e_, __LINE__); \
      std::exit(1);                                                 \
    }                                                               \
  } while (0)

// Values in [-1, 1) from a hash of the index: the same data on every run.
__global__ void fill(__half* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2half(((h & 0xffff) / 32768.0f) - 1.0f);
  }
}

// GPU time per call in microseconds: `calls` calls of enqueue(i) captured in one
// CUDA graph, the graph replayed 15 times, the median replay over `calls`.
template <typename F>
float graph_us(cudaStream_t s, F enqueue, int calls = 20) {
  for (int i = 0; i < 3; ++i) enqueue(i);
  CK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < calls; ++i) enqueue(i);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaGraphLaunch(ge, s));
  std::vector<float> t;
  for (int r = 0; r < 15; ++r) {
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.0f / calls);
  }
  std::sort(t.begin(), t.end());
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t[t.size() / 2];
}

// C (m x n, row-major) = A (m x k, row-major) * B through cuBLAS's default fp16 GEMM
// (fp32 compute), B N-major (k x n, row stride n) or K-major (column stride k): the
// reference and the baseline of the sweeps.
inline void cublas_hgemm(cublasHandle_t h, bool k_major, int m, int n, int k, const __half* a, const __half* b,
                         __half* c) {
  const float one = 1.f, zero = 0.f;
  // Column-major view: C^T (n x m) = op(B^T) (n x k) * A^T (k x m).
  CK(cublasGemmEx(h, k_major ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b, CUDA_R_16F,
                  k_major ? k : n, a, CUDA_R_16F, k, &zero, c, CUDA_R_16F, n, CUBLAS_COMPUTE_32F,
                  CUBLAS_GEMM_DEFAULT));
}

// ||c - ref|| / ||ref|| for a device output against a host reference; a non-finite
// element (an unwritten, NaN-poisoned output) makes it huge.
inline double rel_err(const __half* c_dev, const std::vector<__half>& ref) {
  std::vector<__half> c(ref.size());
  CK(cudaMemcpy(c.data(), c_dev, c.size() * 2, cudaMemcpyDeviceToHost));
  double err = 0, mag = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    const double d = (double)__half2float(c[i]) - __half2float(ref[i]);
    err += std::isfinite(d) ? d * d : 1e30;
    mag += (double)__half2float(ref[i]) * __half2float(ref[i]);
  }
  return std::sqrt(err / mag);
}
