// Direct float32 2-D convolution for one image and group, no im2col: conv.cpp's
// cpu_direct kernel.
//
// The input is viewed (or copied, when there is padding or a stride) as a
// zero-padded, stride-phase-split buffer in which every kernel tap of every output
// position is a fixed offset from the position's flat index: with output pitch Wq
// (>= OW, the extra columns are computed and dropped), output j = oh * Wq + ow reads
// tap k at buf[off[k] + j]. The convolution is then a GEMM
//   C[m, j] = sum_k W[m, k] * buf[off[k] + j]
// whose B operand never needs packing: the register tile (6 output channels × 16
// positions, AVX2/FMA) loads two vectors per tap straight from the buffer and
// broadcasts the weights from their ONNX layout. K is walked in fixed chunks that
// depend only on the shape, so results are the same bits for any thread count.
// Bias, residual and activation are applied when the finished tile is stored.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/conv_kernels.h"

namespace xpuruntime::cpu {

struct DirectConvGeom {
  int64_t c, h, w;       // input channels (of this group) and plane
  int64_t m, oh, ow;     // output channels (of this group) and plane
  int64_t kh, kw, sh, sw, dh, dw;
  int64_t pt, pl;        // top/left padding (bottom/right follow from oh/ow)
};

// Whether conv_direct can run g here (an AVX2/FMA CPU, a non-empty problem).
bool conv_direct_supported(const DirectConvGeom& g);

// y (m × oh × ow) from x (c × h × w) and weights w (m × c·kh·kw, ONNX order);
// bias (m values) and sum (m × oh × ow, the residual) may be null. Parallel over
// our pool; call from outside a parallel_for for that.
void conv_direct(const DirectConvGeom& g, const float* x, const float* w, const float* bias,
                 const float* sum, const ConvEpilogue& e, float* y);

}  // namespace xpuruntime::cpu
