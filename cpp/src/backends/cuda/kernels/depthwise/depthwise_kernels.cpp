// The registry side of the channels-last depthwise convolution: an NhwcConv
// (op key conv_nhwc) whose every group is one input channel with one filter
// (group == C, W [C, 1, kh, kw]), 2-D, with the epilogues the fusion passes put
// on depthwise layers (bias, residual, the activation, the layout pass's SiLU).
// The weights are kept on the device as [kh, kw, C] so a thread's channels are
// contiguous. cuDNN's channels-last conv kernel refuses these cases, so the
// layout pass keeps depthwise-separable networks channels-last end to end only
// where this kernel runs.
#include "backends/cuda/kernels/depthwise/depthwise_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "backends/cuda/cuda_kind.h"
#include "backends/cuda/kernels/common/device_buffer.h"
#include "backends/cuda/kernels/common/op_kernel.h"
#include "backends/cuda/kernels/depthwise/depthwise_impl.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/epilogue.h"
#include "xpuruntime/ops/spatial.h"

namespace xpuruntime::cuda_ops {
namespace {

const std::vector<DType> kTypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

bool present(const OpContext &ctx, std::size_t i) {
  return i < ctx.inputs.size() && !ctx.inputs[i].shape.empty() && ctx.inputs[i].numel() != 0;
}

// The epilogue's activation as the kernel's, false for one it does not apply.
bool activation_of(const ops::Epilogue &e, DwEpilogue &out) {
  out.act = DwActivation::kNone;
  if (!e.has_activation()) return true;
  const std::string &a = e.activation_op;
  if (a == "Relu") {
    out.act = DwActivation::kRelu;
  } else if (a == "Clip") {
    out.act = DwActivation::kClip;
    out.lo = static_cast<float>(e.params.lo);
    out.hi = static_cast<float>(e.params.hi);
  } else if (a == "Sigmoid") {
    out.act = DwActivation::kSigmoid;
  } else if (a == "HardSigmoid") {
    out.act = DwActivation::kHardSigmoid;
    out.alpha = static_cast<float>(e.params.alpha);
    out.beta = static_cast<float>(e.params.beta);
  } else if (a == "HardSwish") {
    out.act = DwActivation::kHardSwish;
  } else if (a == "LeakyRelu") {
    out.act = DwActivation::kLeakyRelu;
    out.alpha = static_cast<float>(e.params.alpha);
  } else if (a == "Tanh") {
    out.act = DwActivation::kTanh;
  } else if (a == "Gelu") {
    // Not fused: with the exact GELU as this kernel's epilogue PVT-v2-b0's 3x3 layers
    // took 80 us on average against 53 us without (H200, batch 32, fp16; the runtime-
    // window kernel), more than the separate GELU kernel each saved: 1.89 against
    // 1.78 ms per inference. The GELU runs as its own kernel after the convolution.
    return false;
  } else {
    return false;
  }
  return true;
}

graph::Node node_of(const OpContext &ctx) {
  graph::Node n;
  n.name = ctx.node;
  n.op_type = "NhwcConv";
  for (const auto &[k, v] : ctx.attrs) n.attrs[k] = graph::Attr::of_string(v);
  return n;
}

bool known(const Shape &s) {
  for (int64_t d : s)
    if (d < 0) return false;
  return true;
}

// X [n, h, w, c] as the logical NCHW shape the geometry rules take.
Shape logical(const Shape &x) { return {x[0], x[3], x[1], x[2]}; }

DwGeometry geometry(const ops::ConvAttrs &a, const Shape &x, const Shape &w) {
  const ops::Spatial sp = ops::conv_geometry(a, logical(x), w);
  DwGeometry g;
  g.n = static_cast<int32_t>(x[0]);
  g.h = static_cast<int32_t>(x[1]);
  g.w = static_cast<int32_t>(x[2]);
  g.c = static_cast<int32_t>(x[3]);
  g.oh = static_cast<int32_t>(sp.out[0]);
  g.ow = static_cast<int32_t>(sp.out[1]);
  g.kh = static_cast<int32_t>(sp.k[0]);
  g.kw = static_cast<int32_t>(sp.k[1]);
  g.sh = static_cast<int32_t>(sp.s[0]);
  g.sw = static_cast<int32_t>(sp.s[1]);
  g.dh = static_cast<int32_t>(sp.d[0]);
  g.dw = static_cast<int32_t>(sp.d[1]);
  g.ph = static_cast<int32_t>(sp.pb[0]);
  g.pw = static_cast<int32_t>(sp.pb[1]);
  return g;
}

Support supports(const OpContext &ctx) {
  // The layout pass asks before the node has an output value.
  const bool out = !ctx.outputs.empty();
  Support s = first_refusal({require_arity(ctx, 2, out ? 1 : 0), require_dense(ctx)});
  if (!s.ok) return s;
  const Shape &x = ctx.inputs[0].shape;
  const Shape &w = ctx.inputs[1].shape;
  if (x.size() != 4 || w.size() != 4)
    return Support::no(reason::kShapeUnsupported,
                       "the depthwise kernel runs 2-D convolutions (X [N, H, "
                       "W, C], W [C, 1, kh, kw])");
  const DType t = ctx.inputs[0].dtype;
  for (std::size_t i = 0; i < ctx.inputs.size() && i < 4; ++i) {
    if (i >= 2 && !present(ctx, i)) continue;
    if (ctx.inputs[i].dtype != t)
      return Support::no(reason::kDtypeUnsupported,
                         "input " + std::to_string(i) + " is " +
                             std::string(dtype_name(ctx.inputs[i].dtype)) + ", X is " +
                             std::string(dtype_name(t)));
  }
  if (out && ctx.outputs[0].dtype != t)
    return Support::no(reason::kDtypeUnsupported, "the output dtype differs from X's");
  const int64_t group = ctx.attr_int("group", 1);
  if (w[1] != 1 || group < 2 || (x[3] >= 0 && group != x[3]) || (w[0] >= 0 && w[0] != group))
    return Support::no(reason::kShapeUnsupported,
                       "not a depthwise convolution (group == channels, one "
                       "filter per channel)");
  if (present(ctx, 2) && ctx.inputs[2].shape.size() != 1)
    return Support::no(reason::kShapeUnsupported, "B must be 1-D");
  if (ctx.attr_int("_sum", 0) != 0) {
    if (!present(ctx, 3))
      return Support::no(reason::kShapeUnsupported, "the fused residual (input 3) is missing");
    if (out && ctx.inputs[3].shape != ctx.outputs[0].shape)
      return Support::no(reason::kShapeUnsupported, "the residual must have the output's shape");
  }
  try {
    const graph::Node n = node_of(ctx);
    DwEpilogue e;
    if (!activation_of(ops::Epilogue::from_node(n), e))
      return Support::no(reason::kAttributeUnsupported,
                         "activation " + ctx.attr_str("_act", "") + " is not fused by this kernel");
    if (!known(x) || !known(w)) return Support::yes();  // dynamic: checked when run
    const ops::Spatial sp = ops::conv_geometry(ops::ConvAttrs::from_node(n), logical(x), w);
    constexpr int64_t kLimit = std::numeric_limits<int32_t>::max();
    if (x[0] * x[1] * x[2] * x[3] >= kLimit || x[0] * sp.out_size() * x[3] >= kLimit)
      return Support::no(reason::kShapeUnsupported, "more than 2^31 elements in X or Y");
  } catch (const XpuRuntimeError &err) {
    return Support::no(reason::kAttributeUnsupported, err.what());
  }
  return Support::yes();
}

PreparedKernelPtr prepare(const PrepareContext &pc) {
  const std::string at = where(pc);
  XRT_CHECK(pc.constants.size() > 1 && pc.constants[1].defined(), UnsupportedOperationError, at,
            ": the depthwise conv kernel needs constant weights (it keeps them "
            "as [kh, kw, C]); "
            "pin KernelPolicy(conv='cudnn') to keep this convolution NCHW");
  const ops::ConvAttrs attrs = ops::ConvAttrs::from_node(*pc.node);
  DwEpilogue epi;
  const ops::Epilogue e = ops::Epilogue::from_node(*pc.node);
  XRT_CHECK(activation_of(e, epi), UnsupportedOperationError, at, ": activation ", e.activation_op,
            " is not fused by the depthwise conv kernel");
  epi.swish = pc.node->attr_int("_swish", 0) != 0;
  const bool residual = e.residual;
  // W [C, 1, kh, kw] -> [kh, kw, C].
  const graph::HostTensor &w = pc.constants[1];
  const int64_t c = w.shape[0], k = w.shape[2] * w.shape[3];
  const std::size_t es = dtype_size(w.dtype);
  std::vector<unsigned char> host(static_cast<std::size_t>(c * k) * es);
  const auto *src = static_cast<const unsigned char *>(w.data);
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t kk = 0; kk < k; ++kk)
      std::copy_n(src + static_cast<std::size_t>(ch * k + kk) * es, es,
                  host.data() + static_cast<std::size_t>(kk * c + ch) * es);
  auto weights = std::make_shared<DeviceBuffer>(host.data(), host.size(), pc.ctx->device.index);
  const Shape w_shape = w.shape;
  return make_prepared([attrs, epi, residual, weights, w_shape, at](const KernelArgs &a) {
    XRT_CHECK(a.inputs.size() >= 2 && !a.outputs.empty(), InvalidArgumentError, at,
              ": the depthwise conv needs X, W and one output");
    const TensorArg &x = a.inputs[0];
    XRT_CHECK(x.shape.size() == 4 && x.shape[3] == w_shape[0], InvalidArgumentError, at, ": X ",
              shape_str(x.shape), " does not have the filter's ", w_shape[0], " channels last");
    const DwGeometry g = geometry(attrs, x.shape, w_shape);
    if (a.outputs[0].numel() == 0) return;
    const void *bias = a.inputs.size() > 2 && a.inputs[2].present() ? a.inputs[2].data : nullptr;
    const void *res = residual && a.inputs.size() > 3 ? a.inputs[3].data : nullptr;
    XRT_CHECK(!residual || res != nullptr, InvalidArgumentError, at,
              ": a fused residual (_sum) needs input 3");
    launch_depthwise_nhwc(x.dtype, g, x.data, weights->data(), bias, res, a.outputs[0].data, epi,
                          a.stream);
  });
}

}  // namespace

void register_depthwise_kernels(KernelRegistry &registry) {
  KernelDef d;
  d.op = "conv_nhwc";
  d.name = "cuda_depthwise";
  d.provider = kProvider;
  d.device = ::xpuruntime::cuda::kind();
  d.dtypes = kTypes;
  d.layouts = {"contiguous"};
  d.min_capability = 90;
  d.priority = 30;  // before cuDNN's, which refuses these cases anyway
  d.deterministic = true;
  d.description =
      "channels-last depthwise 2-D convolution (group == C, any "
      "window, stride, dilation and "
      "pads), fp32 accumulation, 16-byte channel vectors; fused "
      "bias, residual, activation and "
      "SiLU";
  registry.register_kernel(std::make_shared<CudaOpKernel>(std::move(d), supports, prepare),
                           /*replace=*/true);
}

}  // namespace xpuruntime::cuda_ops
