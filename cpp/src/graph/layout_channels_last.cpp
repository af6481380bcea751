// The channels-last layout pass (passes.h): convolutional regions run on
// [N, D1.., C] activations instead of ONNX's [N, C, D1..].
//
// Why: oneDNN's convolutions on this CPU are several times faster on channels-last
// (or blocked) activations than on NCHW, and reordering NCHW in and out around every
// Conv costs as much as the convolution for the few-channel, high-resolution layers
// of MobileNet-class networks (measured on MobileNetV2's convolutions: 4.9 ms with a
// reorder around each, 2.4 ms channels-last throughout). So the layout is chosen for
// regions, not per node, as ONNX Runtime's NCHWc and PyTorch's channels_last do:
//   - every Conv the oneDNN channels-last kernel supports becomes an NhwcConv;
//   - ops that do not care which axis holds the channels follow their input into
//     channels-last: elementwise ops (constants permuted at compile time), Concat,
//     Split, Slice and Reduce* (axes remapped), ShuffleNet's channel shuffle (the same
//     permutation of the channels on [N, H, W, g, C/g]), BatchNormalization (a per-channel Mul and Add), pooling
//     (the Nhwc* pooling ops, where a kernel runs them), Shape (a Gather of the
//     permuted dims) and Transpose (its permutation composed: the NHWC<->NCHW
//     Transposes around a LayerNorm in ConvNeXt or Swin cancel out);
//   - every other reader gets the NCHW tensor back through one Transpose per value
//     (a Reshape, free, when the spatial dims are all 1: squeeze-excitation vectors).
// Graph inputs and outputs keep the model's layout. The pass records one Decision
// (op "layout") saying what it converted, or why it did not run.
#include "graph/layout_channels_last.h"

namespace xpuruntime::graph::passes::channels_last {



bool is_identity(const Perm& p) {
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

// transpose(transpose(x, a), b) == transpose(x, compose(a, b)).
Perm compose(const Perm& a, const Perm& b) {
  Perm r(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) r[i] = a[static_cast<std::size_t>(b[i])];
  return r;
}

// The position of logical axis `axis` in the channels-last order.
int64_t cl_axis(int64_t axis, std::size_t rank) {
  const Perm p = ops::to_channels_last(rank);
  return std::find(p.begin(), p.end(), axis) - p.begin();
}

// A constant transposed at compile time (any dtype: bytes moved element-wise).
HostTensor transposed_constant(const HostTensor& t, const Perm& perm) {
  HostTensor r = HostTensor::alloc(t.dtype, ops::permuted(t.shape, perm));
  const std::size_t es = dtype_size(t.dtype), rank = t.shape.size();
  std::vector<int64_t> in_stride(rank, 1);
  for (std::size_t d = rank; d-- > 1;) in_stride[d - 1] = in_stride[d] * t.shape[d];
  std::vector<int64_t> idx(rank, 0);
  const auto* src = static_cast<const unsigned char*>(t.data);
  auto* dst = static_cast<unsigned char*>(r.data);
  for (int64_t o = 0; o < r.numel(); ++o) {
    int64_t off = 0;
    for (std::size_t d = 0; d < rank; ++d) off += idx[d] * in_stride[static_cast<std::size_t>(perm[d])];
    std::copy_n(src + off * es, es, dst + o * es);
    for (std::size_t d = rank; d-- > 0;) {
      if (++idx[d] < r.shape[d]) break;
      idx[d] = 0;
    }
  }
  return r;
}

bool elementwise_op(const Node& n) {
  static const std::set<std::string> kOps = {
      "Add",  "Sub",   "Mul",     "Div",      "Pow",         "Min",       "Max",  "Sum",
      "Mean", "PRelu", "Relu",    "Sigmoid",  "HardSigmoid", "HardSwish", "Tanh", "LeakyRelu",
      "Elu",  "Selu",  "Gelu",    "Erf",      "Exp",         "Log",       "Sqrt", "Neg",
      "Abs",  "Clip",  "Softplus", "Identity", "Reciprocal", "Mish",      "Sign", "Floor",
      "Ceil", "Round"};
  if (n.domain == "xrt") return n.op_type == "FusedElementwise";
  return n.domain.empty() && kOps.count(n.op_type) != 0;
}

}  // namespace xpuruntime::graph::passes::channels_last

namespace xpuruntime::graph::passes {
namespace {

using channels_last::ChannelsLast;

// Whether the policy lets the pass run. KernelPolicy(conv_nhwc="onednn") asks for it
// (`asked`); otherwise it runs only where Conv is left to the dispatcher: a pinned
// Conv kernel (conv="onednn" included) or a tuning pin on a Conv case runs the model's
// NCHW Conv nodes as pinned.
bool policy_allows(const KernelPolicy& kp, bool& asked, std::string& why) {
  const std::vector<std::string> cl = kp.get("conv_nhwc");
  asked = !cl.empty();
  if (asked) {
    if (cl[0] == std::string(kAutoKernel) || cl[0] == "onednn" || cl[0] == "cudnn") return true;
    why = "KernelPolicy(conv_nhwc=" + cl[0] + ") names no channels-last convolution kernel";
    return false;
  }
  const std::vector<std::string> names = kp.get("conv");
  if (!names.empty() && names[0] != std::string(kAutoKernel)) {
    why = "KernelPolicy(conv=" + names[0] +
          ") pins the model's NCHW Conv nodes (KernelPolicy(conv_nhwc='onednn') asks for "
          "channels-last as well)";
    return false;
  }
  for (const auto& [key, pin] : kp.pins)
    if (key.rfind("conv|", 0) == 0) {
      why = "a tuning pin on a Conv case (" + key + ") keeps convolutions in NCHW";
      return false;
    }
  return true;
}

}  // namespace

int to_channels_last(Graph& g, const ExecutionProvider& provider, const KernelPolicy& kp,
                     std::vector<std::string>& decisions) {
  bool any_conv = false;
  for (const Node& n : g.nodes) any_conv = any_conv || (n.op_type == "Conv" && n.domain.empty());
  if (!any_conv) return 0;
  Decision d;
  d.op = "layout";
  d.node = "native:channels_last";
  d.device = provider.device().str();
  std::string why;
  bool asked = false;
  const bool allowed = policy_allows(kp, asked, why);
  bool kernel = false;
  for (const KernelPtr& k : KernelRegistry::instance().kernels("conv_nhwc")) {
    const KernelDef& def = k->def();
    kernel = kernel || (def.runs_on(provider.kernel_device()) && !def.requested_only);
  }
  int converted = 0;
  if (!allowed) {
    d.rule = rule::kPolicyPrefer;
    d.chosen = "nchw";
    d.detail = why;
  } else if (!kernel) {
    d.rule = "default";
    d.chosen = "nchw";
    d.detail = "no channels-last convolution kernel on " + provider.name();
  } else {
    // On a copy: kept where the policy asks for it (conv_nhwc), else only where the
    // Transposes it needs between the layouts move fewer elements than the
    // convolutions read and write, which is what oneDNN's NCHW path reorders around
    // its primitives (a lone Conv needs a Transpose on each side: no gain, kept NCHW;
    // measured on ShuffleNetV2, whose channel shuffles need Transposes moving 0.46 of
    // that, and Wav2Vec2's conv front end, 0.51: faster channels-last, and Wav2Vec2
    // with half the activation memory). Unknown shapes: fewer Transposes than convs.
    Graph trial = g;
    ChannelsLast pass(trial, provider);
    converted = pass.run();
    const int64_t moved = pass.transposed_elements(), io = pass.conv_elements();
    const bool pays = pass.convs() > 0 && (asked || (moved >= 0 && io >= 0
                                                         ? moved < io
                                                         : pass.transposes() < pass.convs()));
    d.rule = asked ? rule::kPolicyPrefer : "default";
    const std::string what =
        std::to_string(pass.convs()) + " Conv channels-last (NhwcConv) with " +
        std::to_string(converted - pass.convs()) + " other nodes (" +
        std::to_string(pass.swishes()) + " SiLU fused into them), " +
        std::to_string(pass.transposes()) + " Transposes between the layouts" +
        (moved >= 0 && io >= 0 ? " (" + std::to_string(moved) + " elements moved vs " +
                                     std::to_string(io) + " read and written by the convolutions)"
                               : std::string());
    if (pays) {
      g = std::move(trial);
      d.chosen = "channels_last";
      d.detail = what + (asked ? ": converted, as KernelPolicy(conv_nhwc) asks"
                               : ": converted. A pinned Conv kernel, e.g. "
                                 "KernelPolicy(conv='cpu_direct'), keeps the model's NCHW layout");
    } else {
      converted = 0;
      d.chosen = "nchw";
      d.detail = what + ": kept NCHW, the layout changes would cost more than they save";
    }
  }
  decisions.push_back(d.to_json());
  return converted;
}

}  // namespace xpuruntime::graph::passes
