// Float32 building blocks of the CPU Conv kernels (conv.cpp):
//   - ConvEpilogue: bias, residual and fused activation (ops::Epilogue) applied to a block
//     of output rows while it is still in cache, vectorized for the activations
//     MobileNet/ResNet fuse (Relu, Clip, HardSigmoid, HardSwish, LeakyRelu); other
//     activations go through run_unary after the vector part.
//   - a direct depthwise kernel for one channel plane: the input plane is copied
//     once into a zero-padded, stride-phase-split buffer so every kernel tap reads a
//     contiguous row (any stride and dilation), and the output row is accumulated in
//     registers with the epilogue applied before the single store.
// AVX2/FMA versions are chosen at run time (the build targets baseline x86-64);
// portable versions give the same results up to FMA rounding.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/elementwise.h"

namespace xpuruntime::cpu {

// Whether the AVX2/FMA versions run on this CPU.
bool conv_kernels_avx2();

struct ConvEpilogue {
  // Activations with an inline vector form; kOther runs run_unary afterwards.
  enum class Act : uint8_t { kNone, kRelu, kClip, kHardSigmoid, kHardSwish, kLeakyRelu, kOther };
  Act act = Act::kNone;
  float alpha = 0, beta = 0, lo = 0, hi = 0;
  Unary unary = Unary::kIdentity;  // for kOther
  UnaryParams params;

  static ConvEpilogue of(bool has_act, Unary k, const UnaryParams& p);
  bool trivial() const { return act == Act::kNone; }
};

// y[r, 0:cols] = act(y[r, :] + bias[r] + sum[r, :]) for r in [0, rows); row stride
// ld for y and sum. bias and sum may be null.
void conv_epilogue_rows(const ConvEpilogue& e, float* y, int64_t rows, int64_t cols, int64_t ld,
                        const float* bias, const float* sum);
// The same, reading the pre-epilogue values from src (row stride lds) instead of y.
void conv_epilogue_store(const ConvEpilogue& e, const float* src, int64_t lds, float* y,
                         int64_t rows, int64_t cols, int64_t ld, const float* bias,
                         const float* sum);

// One depthwise channel plane (2-D, NCHW): y (oh × ow, dense) from x (h × w, dense)
// and a kh × kw filter, plus bias (a scalar), residual plane `sum` (or null) and
// the epilogue's activation.
struct DwGeom {
  int64_t h, w, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw;  // ph/pw: top/left padding
  int64_t phase_len() const;                             // floats per phase row
  int64_t padded_rows() const { return (oh - 1) * sh + (kh - 1) * dh + 1; }  // rows read
  int64_t scratch_floats() const { return padded_rows() * sw * phase_len(); }
};
// True when depthwise_plane can run g here (AVX2/FMA CPU, kernel up to 16×16).
bool depthwise_plane_supported(const DwGeom& g);
// scratch: g.scratch_floats() floats.
void depthwise_plane(const DwGeom& g, const float* x, const float* w, float bias, const float* sum,
                     const ConvEpilogue& e, float* y, float* scratch);

// y[m] = act(dot(a[m, 0:k], x) + bias[m] + sum[m]) for m in [0, rows): a 1×1
// convolution over a 1×1 image (the squeeze-excitation blocks), a plain GEMV.
void conv_gemv(const ConvEpilogue& e, const float* a, int64_t rows, int64_t k, const float* x,
               const float* bias, const float* sum, float* y);

}  // namespace xpuruntime::cpu
