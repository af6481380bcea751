// See onednn_conv1d_gemm.h.
#include "backends/cpu/kernels/onednn/onednn_conv1d_gemm.h"

#ifdef XRT_HAVE_ONEDNN

#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels/onednn/onednn_context.h"
#include "backends/cpu/kernels/parallel.h"

namespace xpuruntime::cpu {

bool Conv1dGemm::pays(const Geometry& g) {
  // The last chunk's GEMM depth can be a single tap, C: below a few hundred channels
  // the GEMMs run far from their peak (Whisper's first layer, 80 mel channels at
  // stride 1, would be three GEMMs of depth 80) and oneDNN's convolution, which
  // blocks over all K·C at once, is faster.
  return matmul::cpu_gemm_packed_available() && g.in_ch >= 256 && g.out_ch >= 64 &&
         g.out_len() >= 16;
}

Conv1dGemm::Conv1dGemm(const Geometry& g, const float* w) : g_(g) {
  const int64_t c = g.in_ch, o = g.out_ch, k = g.kernel, s = g.stride;
  // W [O, C, K] -> rows (tap, channel), columns O: the GEMMs' right operand.
  std::vector<float> rows(static_cast<std::size_t>(k * c * o));
  for (int64_t oc = 0; oc < o; ++oc)
    for (int64_t ic = 0; ic < c; ++ic)
      for (int64_t tap = 0; tap < k; ++tap)
        rows[static_cast<std::size_t>((tap * c + ic) * o + oc)] = w[(oc * c + ic) * k + tap];
  for (int64_t first = 0; first < k; first += s) {
    Chunk ch;
    ch.first_tap = first;
    ch.taps = std::min(s, k - first);
    const matmul::MatrixRef b{rows.data() + first * c * o, o, 1, 0};
    ch.weights = matmul::PackedB::pack(b, ch.taps * c, o);
    chunks_.push_back(std::move(ch));
  }
}

void Conv1dGemm::run(const float* x, const float* bias, float* y, bool residual) const {
  const int64_t c = g_.in_ch, o = g_.out_ch, t = g_.out_len(),
                padded = g_.len + g_.pad_begin + g_.pad_end;
  for (int64_t n = 0; n < g_.batch; ++n) {
    const float* xn = x + n * g_.len * c;
    if (g_.pad_begin > 0 || g_.pad_end > 0) {
      auto* buf = static_cast<float*>(
          onednn::thread_buffer(0, static_cast<std::size_t>(padded * c) * sizeof(float)));
      std::fill(buf, buf + g_.pad_begin * c, 0.f);
      std::memcpy(buf + g_.pad_begin * c, xn, static_cast<std::size_t>(g_.len * c) * sizeof(float));
      std::fill(buf + (g_.pad_begin + g_.len) * c, buf + padded * c, 0.f);
      xn = buf;
    }
    float* yn = y + n * t * o;
    if (residual && bias != nullptr) {
      // Every GEMM accumulates into the residual, so the bias goes in first.
      parallel_for(t, t * o, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t j = 0; j < o; ++j) yn[r * o + j] += bias[j];
      });
    }
    for (std::size_t j = 0; j < chunks_.size(); ++j) {
      const Chunk& ch = chunks_[j];
      // The window's taps [first_tap, first_tap + taps) of output row 0 start at row
      // first_tap of x; each output row steps S rows.
      matmul::GemmProblem p;
      p.m = t;
      p.n = o;
      p.k = ch.taps * c;
      p.a = {xn + ch.first_tap * c, g_.stride * c, 1, 0};
      p.c = yn;
      p.c_rs = o;
      const bool accumulate = residual || j > 0;
      if (!accumulate) p.bias = bias;
      matmul::cpu_gemm_packed_run(p, *ch.weights, accumulate);
    }
  }
}

}  // namespace xpuruntime::cpu

#endif  // XRT_HAVE_ONEDNN
