// A channels-last 1-D convolution (group 1, no dilation, constant weights) run as
// GEMMs straight on the activations, no im2col copy: NhwcConv's "onednn" kernel uses
// it for the convolutional front ends of speech encoders (Wav2Vec2's seven Conv1d
// layers).
//
// Why it works: in [N, L, C] the window of output t is the K·C floats that start at
// x + t·S·C, contiguous. GEMM rows cannot overlap, so the window is cut into
// ceil(K/S) chunks of at most S taps: chunk j is a [T, taps_j·C] matrix with row
// stride S·C starting at tap j·S, times the matching rows of the weights, and the
// chunks' products add up in C (the bias starts the first, the later ones
// accumulate). With K <= S (Wav2Vec2's kernel-2 stride-2 layers) that is one plain
// GEMM. Padding copies the input once into a zero-padded buffer. The GEMMs are our
// cpu_packed kernel's (weights packed once here, A read in place at any row stride,
// no allocation per call); the activation runs after them.
//
// Why: oneDNN 2.6's channels-last 1-D convolution runs Wav2Vec2's 512-channel,
// kernel-3, stride-2 layer at 129 GFLOP/s on this 2-core AVX-512 machine; the same
// work as GEMMs runs at about 190. (oneDNN's own matmul for the chunks was as fast
// but, on a chunk whose rows are not dense, fell back to its jit GEMM, whose
// internal buffers grew a first run's memory by 5.6 MB.)
#pragma once

// Only with oneDNN (the sources of this folder compile without it too).
#ifdef XRT_HAVE_ONEDNN

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/kernels/matmul/cpu_gemm_packed.h"

namespace xpuruntime::cpu {

class Conv1dGemm {
 public:
  struct Geometry {
    int64_t batch = 0, len = 0, in_ch = 0, out_ch = 0, kernel = 0, stride = 1, pad_begin = 0,
            pad_end = 0;
    int64_t out_len() const { return (len + pad_begin + pad_end - kernel) / stride + 1; }
  };

  // Whether this path runs the geometry, faster than oneDNN's convolution: cpu_packed
  // available (AVX-512F) and enough channels per chunk for an efficient GEMM.
  static bool pays(const Geometry& g);

  // w: the constant weights [O, C, K] (float32), packed here.
  Conv1dGemm(const Geometry& g, const float* w);

  // x [N, L, C], y [N, T, O]; bias [O] or null. `residual`: y holds the residual when
  // run() starts (every GEMM accumulates into it). On our pool's threads.
  void run(const float* x, const float* bias, float* y, bool residual) const;

 private:
  struct Chunk {
    int64_t first_tap = 0, taps = 0;
    std::shared_ptr<const matmul::PackedB> weights;  // rows [first_tap·C, (first_tap + taps)·C)
  };
  Geometry g_;
  std::vector<Chunk> chunks_;
};

}  // namespace xpuruntime::cpu

#endif  // XRT_HAVE_ONEDNN
