// See onednn_conv1d_gemm.h.
#include "backends/cpu/onednn/onednn_conv1d_gemm.h"

#ifdef XRT_HAVE_ONEDNN

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "backends/cpu/onednn/onednn_context.h"

namespace xpuruntime::cpu {

using dnnl::memory;

bool Conv1dGemm::pays(const Geometry& g) {
  // The last chunk's GEMM depth can be a single tap, C: below a few hundred channels
  // the GEMMs run far from their peak (Whisper's first layer, 80 mel channels at
  // stride 1, would be three GEMMs of depth 80) and oneDNN's convolution, which
  // blocks over all K·C at once, is faster.
  return g.in_ch >= 256 && g.out_ch >= 64 && g.out_len() >= 16;
}

Conv1dGemm::Conv1dGemm(const Geometry& g, const float* w, bool bias, bool residual,
                       const dnnl::post_ops& tail)
    : g_(g), bias_(bias) {
  const dnnl::engine& eng = onednn::cpu_engine();
  dnnl::stream& st = onednn::thread_stream();
  const int64_t c = g.in_ch, o = g.out_ch, k = g.kernel, s = g.stride, t = g.out_len();
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
    const int64_t depth = ch.taps * c;
    const memory::desc a({t, depth}, memory::data_type::f32, memory::dims{s * c, 1});
    const memory::desc b({depth, o}, memory::data_type::f32, memory::format_tag::any);
    const memory::desc y({t, o}, memory::data_type::f32, memory::format_tag::ab);
    const bool first_chunk = first == 0, last_chunk = first + s >= k;
    dnnl::post_ops po;
    if (!first_chunk || residual) po.append_sum(1.f);
    if (last_chunk) {
      for (int i = 0; i < tail.len(); ++i) {
        float scale = 0.f, alpha = 0.f, beta = 0.f;
        dnnl::algorithm alg;
        tail.get_params_eltwise(i, scale, alg, alpha, beta);
        po.append_eltwise(scale, alg, alpha, beta);
      }
    }
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (first_chunk && bias) {
      const memory::desc bd({1, o}, memory::data_type::f32, memory::format_tag::ab);
      ch.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, bd, y), attr, eng);
    } else {
      ch.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, y), attr, eng);
    }
    ch.prim = dnnl::matmul(ch.pd);
    memory plain({{depth, o}, memory::data_type::f32, memory::format_tag::ab}, eng,
                 rows.data() + first * c * o);
    ch.weights = memory(ch.pd.weights_desc(), eng);
    dnnl::reorder(plain, ch.weights).execute(st, plain, ch.weights);
    chunks_.push_back(std::move(ch));
  }
  st.wait();
}

void Conv1dGemm::run(const float* x, const float* bias, float* y) const {
  const dnnl::engine& eng = onednn::cpu_engine();
  dnnl::stream& st = onednn::thread_stream();
  const int64_t c = g_.in_ch, t = g_.out_len(), padded = g_.len + g_.pad_begin + g_.pad_end;
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
    float* yn = y + n * t * g_.out_ch;
    for (const Chunk& ch : chunks_) {
      // The window's taps [first_tap, first_tap + taps) of output row 0 start at
      // row first_tap of x; the primitive's strides step S rows per output row.
      memory a(ch.pd.src_desc(), eng, const_cast<float*>(xn + ch.first_tap * c));
      memory out(ch.pd.dst_desc(), eng, yn);
      std::unordered_map<int, memory> args = {
          {DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, ch.weights}, {DNNL_ARG_DST, out}};
      if (ch.first_tap == 0 && bias_)
        args.emplace(DNNL_ARG_BIAS, memory(ch.pd.bias_desc(), eng, const_cast<float*>(bias)));
      if (const std::size_t bytes = ch.pd.scratchpad_desc().get_size(); bytes > 0)
        args.emplace(DNNL_ARG_SCRATCHPAD,
                     memory(ch.pd.scratchpad_desc(), eng, onednn::thread_buffer(3, bytes)));
      ch.prim.execute(st, args);
    }
  }
  st.wait();
}

}  // namespace xpuruntime::cpu

#endif  // XRT_HAVE_ONEDNN
