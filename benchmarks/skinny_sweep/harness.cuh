// Shared pieces of the skinny-GEMM tuning harnesses (skinny_sweep.cu,
// stream_sweep.cu, bw_probe.cu; none is part of the build): a checked-call macro,
// a deterministic fp16 fill and GPU time per call from a CUDA graph.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
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
