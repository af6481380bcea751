// A channels-last 1-D convolution (group 1, no dilation, constant weights) run as
// GEMMs straight on the activations, no im2col copy: NhwcConv's "onednn" kernel uses
// it for the convolutional front ends of speech encoders (Wav2Vec2's seven Conv1d
// layers, Whisper's two).
//
// Why it works: in [N, L, C] the window of output t is the K·C floats that start at
// x + t·S·C, contiguous. Rows of a matrix cannot overlap in oneDNN's memory
// descriptors (nor in BLAS), so the window is cut into ceil(K/S) chunks of at most S
// taps: chunk j is a [T, taps_j·C] matrix with row stride S·C starting at tap j·S,
// times the matching rows of the weights, and the chunks' products add up (the
// later GEMMs accumulate with a sum post-op; the bias goes on the first, the
// activation on the last). With K <= S (Wav2Vec2's kernel-2 stride-2 layers) that is
// one plain GEMM. Padding copies the input once into a zero-padded buffer.
//
// Why: oneDNN 2.6's channels-last 1-D convolution runs Wav2Vec2's 512-channel,
// kernel-3, stride-2 layer at 129 GFLOP/s on this 2-core AVX-512 machine; the same
// work as a GEMM runs at 187 (19.4 vs 13.4 ms).
#pragma once

// Only with oneDNN (the sources of this folder compile without it too).
#ifdef XRT_HAVE_ONEDNN
#include <dnnl.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace xpuruntime::cpu {

class Conv1dGemm {
 public:
  struct Geometry {
    int64_t batch = 0, len = 0, in_ch = 0, out_ch = 0, kernel = 0, stride = 1, pad_begin = 0,
            pad_end = 0;
    int64_t out_len() const { return (len + pad_begin + pad_end - kernel) / stride + 1; }
  };

  // Whether the geometry is one this path runs faster than oneDNN's convolution
  // (measured: enough channels per chunk for an efficient GEMM).
  static bool pays(const Geometry& g);

  // w: the constant weights [O, C, K] (float32), packed here. `residual`: y holds the
  // residual when run() starts (every GEMM accumulates). `tail`: eltwise post-ops
  // (the fused activation, SiLU) applied after the last chunk. Throws dnnl::error
  // where oneDNN has no matmul for a chunk.
  Conv1dGemm(const Geometry& g, const float* w, bool bias, bool residual,
             const dnnl::post_ops& tail);

  // x [N, L, C], y [N, T, O]; bias [O] or null. On the caller's OpenMP thread count.
  void run(const float* x, const float* bias, float* y) const;

 private:
  struct Chunk {
    int64_t first_tap = 0, taps = 0;
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
    dnnl::memory weights;  // packed rows [first_tap·C, (first_tap + taps)·C) of W
  };
  Geometry g_;
  bool bias_ = false;
  std::vector<Chunk> chunks_;
};

}  // namespace xpuruntime::cpu

#endif  // XRT_HAVE_ONEDNN
