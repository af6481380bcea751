// The channels-last depthwise convolution (one filter per channel, 2-D): plain
// arguments, no CUDA headers. The registry side is depthwise_kernels.cpp.
#pragma once

#include <cstdint>

#include "xpuruntime/dtype.h"

namespace xpuruntime::cuda_ops {

// The activation applied after bias and residual (ops::Epilogue's kinds that
// depthwise layers use), then optionally SiLU (the layout pass's "_swish").
enum class DwActivation : int {
  kNone,
  kRelu,
  kClip,  // [lo, hi]: Relu6 and friends
  kSigmoid,
  kHardSigmoid,  // max(0, min(1, alpha * x + beta))
  kHardSwish,
  kLeakyRelu,  // alpha
  kTanh,
};

struct DwGeometry {
  int32_t n = 0, h = 0, w = 0, c = 0;  // X [n, h, w, c]
  int32_t oh = 0, ow = 0;              // Y [n, oh, ow, c]
  int32_t kh = 0, kw = 0, sh = 1, sw = 1, dh = 1, dw = 1, ph = 0, pw = 0;
};

struct DwEpilogue {
  DwActivation act = DwActivation::kNone;
  float alpha = 0.f, beta = 0.f, lo = 0.f, hi = 0.f;
  bool swish = false;
};

// y = act(conv(x, w) + bias + residual) [* sigmoid(.) when swish]. w is [kh,
// kw, c] (channels contiguous), bias [c] or null, residual Y-shaped or null.
// float32, float16 and bfloat16; accumulation in fp32. Every offset must fit
// int32 (the kernel's supports() checks).
void launch_depthwise_nhwc(DType t, const DwGeometry &g, const void *x, const void *w,
                           const void *bias, const void *residual, void *y, const DwEpilogue &e,
                           void *stream);

}  // namespace xpuruntime::cuda_ops
