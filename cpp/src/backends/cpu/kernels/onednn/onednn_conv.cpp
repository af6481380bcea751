// Conv kernel "onednn" (float32, 1-3 spatial dims, any group, stride, dilation, pads):
// oneDNN's convolution primitive, created once per plan step for the step's static
// shapes (and per new shape for a dynamic-shape step, in a small cache).
//   weights   format_tag::any: oneDNN picks its blocked layout; constant weights are
//             reordered into it once, when the step is prepared, and kept here.
//   src, dst  format_tag::any too when the chosen implementation is a direct
//             (blocked) one: the NCHW activation is reordered in and out around the
//             primitive (one pass each; measured faster than oneDNN's NCHW path,
//             which is im2col + GEMM). When oneDNN picks its GEMM path anyway the
//             plain layout is kept and no reorder runs.
//   epilogue  the compiler's fused Conv epilogue as post-ops: bias as the
//             convolution's bias, the residual (input 3) as a sum post-op, the
//             activation as eltwise post-ops (relu, clip, hard-sigmoid: our pass
//             after the primitive, which keeps NaN as ONNX does). An activation oneDNN
//             cannot express makes supports() say no, so another kernel runs the node.
//   1-D       NhwcConv only: a channels-last Conv1d with constant weights and enough
//             channels runs as GEMMs on strided views of the input instead
//             (onednn_conv1d_gemm.h: Wav2Vec2's front end, 1.4x faster).
//   refused   a 1×1 output plane (squeeze-excitation convolutions): a GEMV, which
//             cpu_im2col runs without the layout reorders.
// Threads: the plan's (blocking_threads(): 1 on a contended machine), handed to OpenMP
// (onednn_context.h).
//
// Priority 17: above cpu_direct (15) and cpu_im2col (10), below cpu_depthwise (20).
// Our parallel loops now run on the same OpenMP team as oneDNN (ops/parallel.h), so
// its workers no longer spin against a second pool. Measured on this 2-core AVX-512
// machine (2 threads, batch 1, 224², median of 25 interleaved runs per variant, load
// about 2), latency / ONNX Runtime's, default kernels before -> with onednn above the
// dense kernels: ResNet-18 1.45 -> 1.07, ResNet-50 1.48 -> 1.25, DenseNet-121 1.73 ->
// 1.30, RegNetY-400MF 1.56 -> 1.35, SqueezeNet 1.29 -> 1.13, ShuffleNetV2 1.27 ->
// 1.20, ConvNeXt-T 1.20 -> 1.18, EfficientNet-B0 1.76 -> 1.76; slower on the
// MobileNets, whose high-resolution few-channel pointwise convolutions pay the
// NCHW <-> blocked reorders around each primitive (V2 1.62 -> 1.87, V3-L 1.62 ->
// 1.82). Depthwise convolutions stay with cpu_depthwise (faster than oneDNN's here).
#include "backends/cpu/kernels/onednn/onednn_conv.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>

#include "backends/cpu/kernels/onednn/onednn_compat.h"
#include "backends/cpu/kernels/onednn/onednn_context.h"
#include "backends/cpu/kernels/onednn/onednn_conv1d_gemm.h"
#include "backends/cpu/kernels/elementwise.h"
#include "backends/cpu/kernels/contention.h"
#include "backends/cpu/kernels/parallel.h"
#include "backends/cpu/kernels/spatial.h"
#include "xpuruntime/ops/epilogue.h"

namespace xpuruntime::cpu {
namespace {

// A fused epilogue's activation as oneDNN eltwise post-ops (algorithm, alpha, beta
// in oneDNN's terms); false with the reason when oneDNN has no exact equivalent.
struct Eltwise {
  int alg = 0;  // dnnl_alg_kind_t
  float alpha = 0.f, beta = 0.f;
};

// Activations whose oneDNN post-op turns NaN into a number (relu, and clip through
// max/min): ONNX keeps NaN, so these run as our own pass over the output after the
// primitive (bias and residual stay fused).
bool activation_after(const ops::Epilogue& e) {
  using ops::Unary;
  return e.has_activation() &&
         (e.activation == Unary::kRelu || e.activation == Unary::kClip || e.activation == Unary::kHardSigmoid);
}

bool eltwise_of(const ops::Epilogue& e, std::vector<Eltwise>& out, std::string& why) {
  if (!e.has_activation() || activation_after(e)) return true;
  using ops::Unary;
  const float a = static_cast<float>(e.params.alpha), b = static_cast<float>(e.params.beta);
#ifdef XRT_HAVE_ONEDNN
  switch (e.activation) {
    case Unary::kRelu: out.push_back({dnnl_eltwise_relu, 0.f, 0.f}); return true;
    case Unary::kLeakyRelu: out.push_back({dnnl_eltwise_relu, a, 0.f}); return true;
    case Unary::kSigmoid: out.push_back({dnnl_eltwise_logistic, 0.f, 0.f}); return true;
    case Unary::kTanh: out.push_back({dnnl_eltwise_tanh, 0.f, 0.f}); return true;
    case Unary::kElu: out.push_back({dnnl_eltwise_elu, a, 0.f}); return true;
    case Unary::kGelu: out.push_back({dnnl_eltwise_gelu_erf, 0.f, 0.f}); return true;
    case Unary::kGeluTanh: out.push_back({dnnl_eltwise_gelu_tanh, 0.f, 0.f}); return true;
    // ONNX HardSwish, x·max(0, min(1, x/6 + 1/2)): oneDNN 2.x's hardswish is that with
    // fixed constants; 3.x's takes them as alpha and beta (2.x ignores them).
    case Unary::kHardSwish: out.push_back({dnnl_eltwise_hardswish, 1.f / 6.f, 0.5f}); return true;
    case Unary::kHardSigmoid:  // max(0, min(1, alpha·x + beta)): linear, then clip
      out.push_back({dnnl_eltwise_linear, a, b});
      out.push_back({dnnl_eltwise_clip_v2, 0.f, 1.f});
      return true;
    case Unary::kClip:
      out.push_back({dnnl_eltwise_clip_v2, static_cast<float>(e.params.lo),
                     static_cast<float>(e.params.hi)});
      return true;
    default: break;
  }
#else
  (void)a, (void)b, (void)out;
#endif
  why = "oneDNN has no post-op for the fused activation " + e.activation_op;
  return false;
}

// Shapes a primitive can be built for: every dim known, rank 3-5.
bool static_shape(const Shape& s) {
  if (s.size() < 3 || s.size() > 5) return false;
  for (int64_t d : s)
    if (d < 0) return false;
  return true;
}

#ifdef XRT_HAVE_ONEDNN

using dnnl::memory;
using Tag = memory::format_tag;

// The case one primitive serves: input and weight shapes, bias present, threads.
struct ConvKey {
  Shape x, w;
  bool bias = false;
  int threads = 0;
  bool operator==(const ConvKey&) const = default;
};

// One primitive with its reorders and (constant weights) its packed weights.
struct Entry {
  ConvKey key;
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward conv;
  memory::desc user_x, user_w, user_y, bias_md;
  std::optional<dnnl::reorder> x_in, y_in, y_out, w_in;  // empty: layouts equal
  memory packed_w;                                       // empty: weights not constant
  // The residual added (and the activation applied) by our passes after the
  // primitive instead of as post-ops (see padding_only_outputs).
  bool residual_after = false;
  // Set instead of the primitive: a channels-last 1-D convolution run as GEMMs.
  std::shared_ptr<const Conv1dGemm> gemm;
};

memory::dims dims_of(const Shape& s) { return memory::dims(s.begin(), s.end()); }

Tag plain_tag(std::size_t rank) {
  return rank == 3 ? Tag::ncw : rank == 4 ? Tag::nchw : Tag::ncdhw;
}

Tag channels_last_tag(std::size_t rank) {
  return rank == 3 ? Tag::nwc : rank == 4 ? Tag::nhwc : Tag::ndhwc;
}

// The activations' layout a primitive is built for: oneDNN's choice (reordered in and
// out), the plain NCHW layout, or channels-last (NhwcConv: no reorder at all).
enum class Act { kAny, kPlain, kChannelsLast };

// The ONNX weight [M, C/g, k...] as oneDNN sees it: [g, M/g, C/g, k...] when grouped.
memory::desc weight_md(const Shape& w, int64_t group, Tag fmt) {
  memory::dims d = dims_of(w);
  if (group > 1) {
    d[0] /= group;
    d.insert(d.begin(), group);
    if (fmt != Tag::any) fmt = w.size() == 3 ? Tag::goiw : w.size() == 4 ? Tag::goihw : Tag::goidhw;
  } else if (fmt != Tag::any) {
    fmt = w.size() == 3 ? Tag::oiw : w.size() == 4 ? Tag::oihw : Tag::oidhw;
  }
  return memory::desc(d, memory::data_type::f32, fmt);
}

// A primitive descriptor for the case (k.x in logical NCHW order) and layout.
// `swish`: NhwcConv's "_swish" attribute, x·sigmoid(x) after everything else (the
// layout pass folds a SiLU that only reads the convolution's output into it).
dnnl::convolution_forward::primitive_desc make_pd(const ConvAttrs& a, const ops::Epilogue& e,
                                                  const ConvKey& k, Act layout,
                                                  bool swish = false) {
  const ops::Spatial g = conv_geometry(a, k.x, k.w);
  Shape ys = {k.x[0], k.w[0]};
  ys.insert(ys.end(), g.out.begin(), g.out.end());
  memory::dims strides, dil, pl, pr;
  for (int64_t i = 0; i < g.rank(); ++i) {
    strides.push_back(g.s[i]);
    dil.push_back(g.d[i] - 1);  // oneDNN counts the gaps between taps
    pl.push_back(g.pb[i]);
    pr.push_back(g.pe[i]);
  }
  const Tag act = layout == Act::kPlain           ? plain_tag(k.x.size())
                  : layout == Act::kChannelsLast ? channels_last_tag(k.x.size())
                                                 : Tag::any;
  const memory::desc x(dims_of(k.x), memory::data_type::f32, act);
  const memory::desc y(dims_of(ys), memory::data_type::f32, act);
  const memory::desc w = weight_md(k.w, a.group, Tag::any);
  const memory::desc b({k.w[0]}, memory::data_type::f32, Tag::x);
  dnnl::post_ops po;
  if (e.residual) po.append_sum(1.f);
  std::vector<Eltwise> elt;
  std::string why;
  eltwise_of(e, elt, why);
  for (const Eltwise& el : elt)
    onednn::append_eltwise(po, static_cast<dnnl::algorithm>(el.alg), el.alpha, el.beta);
  // oneDNN's swish keeps NaN (x·sigmoid(x) with no max/min), as ONNX's Mul(x, Sigmoid(x)).
  if (swish) onednn::append_eltwise(po, dnnl::algorithm::eltwise_swish, 1.f, 0.f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  // Our scratchpad, per thread (run_views): with the library's mode the primitive may
  // own one buffer for all its executions, and sessions run one step from several
  // threads at once (measured: wrong results from four threads sharing a session).
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return onednn::conv_pd(x, w, k.bias ? &b : nullptr, y, strides, dil, pl, pr, attr, onednn::cpu_engine());
}

// True when some output position's window lies wholly in the padding (a kernel
// dimension of 1 with padding, or a dilated window that straddles a small input).
// oneDNN 2.6's brgconv then leaves the fused residual (sum post-op) out of those
// positions when a bias is fused too (measured: wrong results); its GEMM path, taken
// on the plain layout, gets them right. oneDNN 3.x has no such bug (the workaround is
// only compiled in against 2.x).
bool padding_only_outputs(const ConvAttrs& a, const Shape& x, const Shape& w) {
  const ops::Spatial g = conv_geometry(a, x, w);
  for (int64_t i = 0; i < g.rank(); ++i)
    for (int64_t o = 0; o < g.out[i]; ++o) {
      bool hit = false;
      for (int64_t t = 0; t < g.k[i] && !hit; ++t) {
        const int64_t p = o * g.s[i] - g.pb[i] + t * g.d[i];
        hit = p >= 0 && p < g.in[i];
      }
      if (!hit) return true;
    }
  return false;
}

std::optional<dnnl::reorder> reorder_if(const memory::desc& from, const memory::desc& to) {
  if (from == to) return std::nullopt;
  return dnnl::reorder(dnnl::reorder::primitive_desc(onednn::cpu_engine(), from, onednn::cpu_engine(), to));
}


// Conv/"onednn" bound to one plan step.
class OnednnConvPrepared final : public PreparedKernel {
 public:
  // channels_last: NhwcConv, X / Y / residual are [N, D1.., C].
  OnednnConvPrepared(Node node, graph::HostTensor weights, std::optional<ConvKey> key,
                     bool channels_last)
      : node_(std::move(node)),
        attrs_(ConvAttrs::from_node(node_)),
        epi_(ops::Epilogue::from_node(node_)),
        swish_(node_.attr_int("_swish", 0) != 0),
        weights_(std::move(weights)),
        channels_last_(channels_last) {
    XRT_CHECK(!swish_ || (channels_last_ && !epi_.residual && !epi_.has_activation()),
              InvalidModelError, node_.where(),
              ": _swish is the layout pass's fused SiLU of an NhwcConv without residual or "
              "activation");
    if (key) first_ = build(*key);
  }

  void run(const KernelArgs& args) const override {
    const std::vector<TensorView> in = views_of(args.inputs);
    std::vector<TensorView> out = views_of(args.outputs);
    run_views(in, out);
  }

  void run_views(const std::vector<TensorView>& in, std::vector<TensorView>& out) const {
    XRT_CHECK(in.size() >= 2 && !out.empty(), InvalidArgumentError, node_.where(),
              ": onednn Conv needs X, W and one output");
    XRT_CHECK(in[0].dtype == DType::kFloat32 && in[1].dtype == DType::kFloat32,
              UnsupportedOperationError, node_.where(), ": the onednn Conv kernel runs float32, got ",
              dtype_name(in[0].dtype), " (pin conv to cpu_im2col for other dtypes)");
    const bool has_bias = in.size() > 2 && in[2].data != nullptr;
    // 1 on a contended machine (parallel.h): the primitive's OpenMP barrier would wait
    // for a descheduled thread.
    const int threads = blocking_threads();
    onednn::OmpThreads omp(threads);
    XRT_CHECK(!channels_last_ || (in[0].shape.size() >= 3 && in[0].shape.size() <= 5),
              InvalidArgumentError, node_.where(), ": X ", shape_str(in[0].shape),
              " must be [N, D1.., C] with 1-3 spatial dimensions");
    const Shape x = channels_last_ ? ops::permuted(in[0].shape, ops::from_channels_last(in[0].shape.size()))
                                   : in[0].shape;
    const std::shared_ptr<const Entry> e = entry_for({x, in[1].shape, has_bias, threads});
    const dnnl::engine& eng = onednn::cpu_engine();
    dnnl::stream& st = onednn::thread_stream();
    const TensorView& y = out[0];
    if (e->gemm) {
      run_gemm_path(*e->gemm, in, y);
      return;
    }
    try {
      memory xu(e->user_x, eng, in[0].data), yu(e->user_y, eng, y.data);
      memory src = xu, dst = yu;
      if (e->x_in) {
        src = memory(e->pd.src_desc(), eng, onednn::thread_buffer(0, e->pd.src_desc().get_size()));
        e->x_in->execute(st, xu, src);
      }
      if (e->y_out) dst = memory(e->pd.dst_desc(), eng, onednn::thread_buffer(1, e->pd.dst_desc().get_size()));
      // The planner may give the output the residual's buffer (in place): where the
      // residual is added after the primitive, the convolution goes to scratch first.
      const bool conv_aside = e->residual_after && in[3].data == y.data;
      if (conv_aside) dst = memory(e->pd.dst_desc(), eng, onednn::thread_buffer(1, e->pd.dst_desc().get_size()));
      if (epi_.residual) {
        XRT_CHECK(in.size() > 3 && in[3].data != nullptr && in[3].numel() == y.numel(),
                  InvalidArgumentError, node_.where(),
                  ": the fused residual (input 3) must have the output's shape");
      }
      if (epi_.residual && !e->residual_after) {
        // The sum post-op adds what dst holds: the residual, in dst's layout.
        if (e->y_in) {
          memory ru(e->user_y, eng, in[3].data);
          e->y_in->execute(st, ru, dst);
        } else if (in[3].data != y.data) {
          std::memcpy(y.data, in[3].data, y.nbytes());
        }
      }
      memory w = e->packed_w;
      if (!w) {
        memory wu(e->user_w, eng, in[1].data);
        w = wu;
        if (e->w_in) {
          w = memory(e->pd.weights_desc(), eng, onednn::thread_buffer(2, e->pd.weights_desc().get_size()));
          e->w_in->execute(st, wu, w);
        }
      }
      std::unordered_map<int, memory> a = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, dst}};
      if (has_bias) a.emplace(DNNL_ARG_BIAS, memory(e->bias_md, eng, in[2].data));
      if (const std::size_t bytes = e->pd.scratchpad_desc().get_size(); bytes > 0)
        a.emplace(DNNL_ARG_SCRATCHPAD, memory(e->pd.scratchpad_desc(), eng, onednn::thread_buffer(3, bytes)));
      e->conv.execute(st, a);
      if (e->y_out) e->y_out->execute(st, dst, yu);
      st.wait();
      if (e->residual_after)
        add_residual(static_cast<const float*>(conv_aside ? dst.get_data_handle() : y.data), in[3], y);
      if (activation_after(epi_) || (e->residual_after && epi_.has_activation()))
        run_unary(epi_.activation, epi_.params, DType::kFloat32, y.data, y.data, y.numel());
    } catch (const dnnl::error& err) {
      XRT_THROW(UnsupportedOperationError, node_.where(), ": oneDNN convolution failed: ", err.what(),
                " (pin conv to cpu_im2col to run it without oneDNN)");
    }
  }

 private:
  // The primitive for a case: the one built at prepare, else from the cache
  // (built on first use; the oldest dropped past kCacheSize).
  std::shared_ptr<const Entry> entry_for(const ConvKey& k) const {
    if (first_ && first_->key == k) return first_;
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : cache_)
      if (e->key == k) return e;
    std::shared_ptr<const Entry> e = build(k);
    if (cache_.size() >= kCacheSize) cache_.erase(cache_.begin());
    cache_.push_back(e);
    return e;
  }

  void run_gemm_path(const Conv1dGemm& gemm, const std::vector<TensorView>& in,
                     const TensorView& y) const {
    if (epi_.residual) {
      XRT_CHECK(in.size() > 3 && in[3].data != nullptr && in[3].numel() == y.numel(),
                InvalidArgumentError, node_.where(),
                ": the fused residual (input 3) must have the output's shape");
      if (in[3].data != y.data) std::memcpy(y.data, in[3].data, y.nbytes());  // summed into
    }
    gemm.run(in[0].ptr<const float>(), in.size() > 2 && in[2].data ? in[2].ptr<const float>() : nullptr,
             y.ptr<float>(), epi_.residual);
    if (epi_.has_activation())
      run_unary(epi_.activation, epi_.params, DType::kFloat32, y.data, y.data, y.numel());
  }

  // The 1-D GEMM path (onednn_conv1d_gemm.h) for a channels-last case it pays on,
  // with constant weights; null otherwise.
  std::shared_ptr<const Conv1dGemm> gemm_for(const ConvKey& k) const {
    if (!channels_last_ || swish_ || k.x.size() != 3 || attrs_.group != 1 ||
        !weights_.defined() || weights_.shape != k.w)
      return nullptr;
    const ops::Spatial sp = conv_geometry(attrs_, k.x, k.w);
    if (sp.d[0] != 1) return nullptr;
    Conv1dGemm::Geometry g{k.x[0], k.x[2], k.x[1], k.w[0], sp.k[0], sp.s[0], sp.pb[0], sp.pe[0]};
    if (g.out_len() != sp.out[0] || !Conv1dGemm::pays(g)) return nullptr;
    return std::make_shared<const Conv1dGemm>(g, static_cast<const float*>(weights_.data));
  }

  // y = conv + r (float32, same shape; y may be conv or r), split over the plan's
  // threads.
  static void add_residual(const float* conv, const TensorView& r, const TensorView& y) {
    const float* rp = static_cast<const float*>(r.data);
    float* yp = static_cast<float*>(y.data);
    parallel_for(y.numel(), 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) yp[i] = conv[i] + rp[i];
    });
  }

  std::shared_ptr<const Entry> build(const ConvKey& k) const {
    XRT_CHECK(static_shape(k.x) && k.w.size() == k.x.size(), InvalidArgumentError, node_.where(),
              ": onednn Conv needs X and W of rank 3-5, got ", shape_str(k.x), " and ",
              shape_str(k.w));
    onednn::OmpThreads omp(k.threads);
    try {
      auto e = std::make_shared<Entry>();
      e->key = k;
      if ((e->gemm = gemm_for(k))) return e;
      // oneDNN 2.6's bug only: 3.x fuses the residual there correctly (tested by
      // test_residual_and_bias_where_windows_see_only_padding on a 3.2 build).
      const bool padding_only = !onednn::kOnednn3 && epi_.residual && padding_only_outputs(attrs_, k.x, k.w);
      if (channels_last_) {
        // No plain fallback here: the residual and activation run after the primitive.
        e->residual_after = padding_only;
        ops::Epilogue fused = epi_;
        if (padding_only) fused = ops::Epilogue{.bias = epi_.bias};
        e->pd = make_pd(attrs_, fused, k, Act::kChannelsLast, swish_);
      } else {
        e->pd = make_pd(attrs_, epi_, k, padding_only ? Act::kPlain : Act::kAny);
        // oneDNN's GEMM path takes NCHW itself: reorders around it would only cost.
        if (!padding_only && std::string(e->pd.impl_info_str()).find("gemm") != std::string::npos)
          e->pd = make_pd(attrs_, epi_, k, Act::kPlain);
      }
      e->conv = dnnl::convolution_forward(e->pd);
      const Tag t = channels_last_ ? channels_last_tag(k.x.size()) : plain_tag(k.x.size());
      e->user_x = memory::desc(dims_of(k.x), memory::data_type::f32, t);
      e->user_y = memory::desc(onednn::dims_of(e->pd.dst_desc()), memory::data_type::f32, t);
      e->user_w = weight_md(k.w, attrs_.group, plain_tag(k.x.size()));
      e->bias_md = memory::desc({k.w[0]}, memory::data_type::f32, Tag::x);
      e->x_in = reorder_if(e->user_x, e->pd.src_desc());
      e->y_out = reorder_if(e->pd.dst_desc(), e->user_y);
      if (epi_.residual) e->y_in = reorder_if(e->user_y, e->pd.dst_desc());
      e->w_in = reorder_if(e->user_w, e->pd.weights_desc());
      if (weights_.defined() && weights_.shape == k.w) {
        // Constant weights: packed once into the primitive's layout, kept with it.
        memory wu(e->user_w, onednn::cpu_engine(), weights_.data);
        e->packed_w = memory(e->pd.weights_desc(), onednn::cpu_engine());
        dnnl::stream& st = onednn::thread_stream();
        if (e->w_in) e->w_in->execute(st, wu, e->packed_w);
        else std::memcpy(e->packed_w.get_data_handle(), weights_.data, weights_.nbytes());
        st.wait();
      }
      return e;
    } catch (const dnnl::error& err) {
      XRT_THROW(UnsupportedOperationError, node_.where(), ": oneDNN has no convolution for X ",
                shape_str(k.x), ", W ", shape_str(k.w), ": ", err.what(),
                " (pin conv to cpu_im2col or cpu_direct)");
    }
  }

  static constexpr std::size_t kCacheSize = 8;  // shapes one dynamic step keeps
  Node node_;
  ConvAttrs attrs_;
  ops::Epilogue epi_;
  graph::HostTensor weights_;  // the constant W, or undefined
  bool swish_ = false;  // NhwcConv only, never with a residual or an activation
  bool channels_last_ = false;
  std::shared_ptr<const Entry> first_;
  mutable std::mutex mu_;
  mutable std::vector<std::shared_ptr<const Entry>> cache_;
};

PreparedKernelPtr onednn_prepare(const OpDef& def, const PrepareContext& pc) {
  const bool channels_last = def.op_type == "NhwcConv";
  Node n = prepared_node(def.op_type, pc);
  graph::HostTensor w;
  if (pc.constants.size() > 1 && pc.constants[1].defined() && pc.constants[1].dtype == DType::kFloat32)
    w = pc.constants[1];
  std::optional<ConvKey> key;
  if (pc.ctx != nullptr && pc.ctx->inputs.size() >= 2 && static_shape(pc.ctx->inputs[0].shape) &&
      static_shape(pc.ctx->inputs[1].shape)) {
    const bool bias = pc.ctx->inputs.size() > 2 && !pc.ctx->inputs[2].shape.empty();
    const Shape& x = pc.ctx->inputs[0].shape;
    key = ConvKey{channels_last ? ops::permuted(x, ops::from_channels_last(x.size())) : x,
                  pc.ctx->inputs[1].shape, bias, parallel_threads()};
  }
  return std::make_shared<OnednnConvPrepared>(std::move(n), std::move(w), std::move(key),
                                              channels_last);
}

#endif  // XRT_HAVE_ONEDNN

// Conv (channels_last false) or NhwcConv (X [N, D1.., C]).
Support supports_layout(const Node& n, const std::vector<Meta>& in, bool channels_last) {
  if (!onednn::onednn_available()) return Support::no(reason::kBackendUnavailable, onednn::onednn_info());
  const ops::Epilogue e = ops::Epilogue::from_node(n);
  std::vector<Eltwise> elt;
  std::string why;
  if (!eltwise_of(e, elt, why)) return Support::no(reason::kAttributeUnsupported, why);
  if (in.size() < 2 || !in[0].shape || !in[1].shape) return Support::yes();  // built per shape at run
  const Shape& w = *in[1].shape;
  if (in[0].shape->size() < 3 || in[0].shape->size() > 5 || w.size() != in[0].shape->size())
    return Support::no(reason::kShapeUnsupported, "only 1-3 spatial dimensions");
  const Shape x = channels_last ? ops::permuted(*in[0].shape, ops::from_channels_last(w.size()))
                                : *in[0].shape;
  if (!static_shape(x) || !static_shape(w)) return Support::yes();
  // A 1×1 output plane (squeeze-excitation convolutions, classifier heads) is one dot
  // product per output channel: cpu_im2col's GEMV runs it without the reorders into
  // and out of the blocked layout, which cost more than the product here. Channels-last
  // activations need no reorder, so NhwcConv takes it.
  if (!channels_last && shape_numel(conv_geometry(ConvAttrs::from_node(n), x, w).out) <= 1)
    return Support::no(reason::kShapeUnsupported,
                       "a 1×1 output plane is one dot product per channel (cpu_im2col's GEMV)");
#ifdef XRT_HAVE_ONEDNN
  try {
    const bool bias = in.size() > 2 && in[2].present;
    make_pd(ConvAttrs::from_node(n), e, ConvKey{x, w, bias, parallel_threads()},
            channels_last ? Act::kChannelsLast : Act::kAny, n.attr_int("_swish", 0) != 0);
  } catch (const dnnl::error& err) {
    return Support::no(reason::kShapeUnsupported, std::string("oneDNN: ") + err.what());
  }
#endif
  return Support::yes();
}

Support onednn_supports(const Node& n, const std::vector<Meta>& in) {
  return supports_layout(n, in, false);
}

Support onednn_nhwc_supports(const Node& n, const std::vector<Meta>& in) {
  return supports_layout(n, in, true);
}

}  // namespace

void register_onednn_conv_ops(std::vector<OpDef>& defs) {
  OpDef d;
  d.op_type = "Conv";
  d.kernel = "onednn";
  d.dtypes = {DType::kFloat32};
  d.priority = 17;
  d.description =
      "oneDNN convolution (libdnnl): weights packed once into its blocked layout, bias, "
      "residual and activation as post-ops, a primitive per shape";
  d.supports = onednn_supports;
#ifdef XRT_HAVE_ONEDNN
  d.run = [](const Node& n, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
    OnednnConvPrepared(n, graph::HostTensor{}, std::nullopt, false).run_views(in, out);
  };
  d.prepare = onednn_prepare;
#else
  d.run = [](const Node& n, const std::vector<TensorView>&, std::vector<TensorView>&) {
    XRT_THROW(BackendUnavailableError, n.where(), ": onednn Conv: ", onednn::onednn_info());
  };
#endif
  defs.push_back(d);

  // NhwcConv: the channels-last layout pass's convolution, oneDNN's only (the pass
  // creates it only where this kernel supports the node).
  OpDef c = d;
  c.op_type = "NhwcConv";
  c.priority = 10;
  c.description =
      "oneDNN convolution on channels-last activations: no reorder around the primitive, "
      "weights packed once, bias, residual and activation as post-ops";
  c.supports = onednn_nhwc_supports;
#ifdef XRT_HAVE_ONEDNN
  c.run = [](const Node& n, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
    OnednnConvPrepared(n, graph::HostTensor{}, std::nullopt, true).run_views(in, out);
  };
#endif
  defs.push_back(c);
}

}  // namespace xpuruntime::cpu
