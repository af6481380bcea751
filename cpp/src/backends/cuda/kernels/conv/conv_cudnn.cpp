// Conv on CUDA through cuDNN v9's legacy API (kernel "cudnn", provider
// "cudnn").
//
// prepare() parses ConvAttrs and the fused ops::Epilogue once, builds the
// tensor, filter, convolution and activation descriptors for the prepared
// shapes and picks the algorithm: the one PrepareContext::algorithm names (a
// pin or tuning), else the first of cudnnGetConvolutionForwardAlgorithm_v7's
// heuristic ranking that is deterministic, fits the policy's workspace limit
// and keeps the policy's math (no TF32 for float32 unless allowed). The
// heuristic needs no device memory, so prepare stays cheap and gives the same
// choice on the same GPU and library.
//
// Geometry: 1-D convolutions run as 2-D ones with a unit leading dim. cuDNN
// pads symmetrically only, so an asymmetric pad (explicit, or SAME_* with an
// even window) gives cuDNN the smaller side and copies the input, zero-padded
// by the difference, into the workspace first.
//
// Epilogue: bias + Relu (+ residual) through
// cudnnConvolutionBiasActivationForward, and a bias alone (+ residual) through the
// same call with the identity activation where the implicit precomputed GEMM
// algorithm was chosen (the only one cuDNN fuses identity with); cases it does not
// take (Relu or residual without a bias, or a configuration it refuses at run
// time, which is then remembered) run the convolution with beta = 1 over a copy
// of the residual and one bias/Relu kernel (conv_epilogue.cu). Other
// activations are refused in supports().
//
// Channels-last: the same kernel registered for NhwcConv (op conv_nhwc, what the
// compiler's layout pass makes of a conv region) takes X and Y as [N, H, W, C] and
// keeps the weights it was given as ONNX [M, C/g, kH, kW] transposed once, at
// prepare, into cuDNN's KRSC filter layout. cuDNN's tensor-core kernels compute in
// NHWC, so an NCHW convolution pays an NCHW->NHWC and an NHWC->NCHW transpose inside
// cuDNN around every call (measured on an H200, ResNet-50 fp16, batch 32: 62% of the
// run); a channels-last region pays them once, at its edges. 2-D convolutions with
// symmetric pads and constant weights only.
//
// Batch chunks: where the chosen algorithm's workspace exceeds the bytes of the
// convolution's input and output (and 16 MiB), the same algorithm runs over halves of
// the batch (or quarters, ...) so the workspace fits the tensors; see make_plan.
//
// Handles: cudnn_common.h (pooled per device, leased per run).
#include <cudnn.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <memory>
#include <vector>

#include "backends/cuda/cuda_kind.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common/device_buffer.h"
#include "backends/cuda/kernels/common/op_kernel.h"
#include "backends/cuda/kernels/conv/conv_cudnn_kernels.h"
#include "backends/cuda/kernels/conv/conv_epilogue_impl.h"
#include "backends/cuda/kernels/conv/cudnn_common.h"
#include "backends/cuda/kernels/data/data_impl.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/epilogue.h"
#include "xpuruntime/ops/spatial.h"

namespace xpuruntime::cudnn_conv {
namespace {

constexpr const char* kName = "cudnn";
constexpr std::size_t kAlign = 256;

struct AlgoName {
  cudnnConvolutionFwdAlgo_t algo;
  const char* name;
};
constexpr AlgoName kAlgos[] = {
    {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, "implicit_gemm"},
    {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, "implicit_precomp_gemm"},
    {CUDNN_CONVOLUTION_FWD_ALGO_GEMM, "gemm"},
    {CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, "direct"},
    {CUDNN_CONVOLUTION_FWD_ALGO_FFT, "fft"},
    {CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING, "fft_tiling"},
    {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, "winograd"},
    {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, "winograd_nonfused"},
};

const char* algo_name(cudnnConvolutionFwdAlgo_t a) {
  for (const AlgoName& n : kAlgos)
    if (n.algo == a) return n.name;
  return "unknown";
}

std::string algo_names() {
  std::string s;
  for (const AlgoName& n : kAlgos) s += (s.empty() ? "" : ", ") + std::string(n.name);
  return s;
}

cudnnDataType_t data_type(DType t) {
  switch (t) {
    case DType::kFloat32:
      return CUDNN_DATA_FLOAT;
    case DType::kFloat16:
      return CUDNN_DATA_HALF;
    case DType::kBFloat16:
      return CUDNN_DATA_BFLOAT16;
    default:
      XRT_THROW(InvalidArgumentError, "cudnn conv: dtype ", dtype_name(t), " is not taken");
  }
}

// What prepare() fixed for every plan of a step.
struct Settings {
  std::string where;  // "node 'c1' (Conv)"
  ops::ConvAttrs attrs;
  DType dtype = DType::kFloat32;
  bool bias = false, residual = false, relu = false;
  bool allow_tf32 = false;
  bool nhwc = false;      // NhwcConv: X, Y (and the residual) channels-last, W in KRSC
  std::string algorithm;  // "" = the heuristic's choice
  int device = 0;
};

// X as cuDNN's dims see it: [N, C, D1..] (NhwcConv's X is [N, D1.., C]).
Shape logical_x(const Shape& x, bool nhwc) {
  if (!nhwc || x.size() < 3) return x;
  Shape r = {x[0], x.back()};
  r.insert(r.end(), x.begin() + 1, x.end() - 1);
  return r;
}

// Descriptors and algorithm for one (X, W) shape pair. Immutable after
// make_plan except fused_ok, which records that cuDNN refused the fused call.
struct Plan {
  int64_t batch = 0, out_channels = 0, out_inner = 0;
  bool explicit_pad = false;
  cuda_ops::PadIndex pad;
  std::size_t pad_bytes = 0;  // padded input copy, rounded up to kAlign
  TensorDesc x, y, bias;
  FilterDesc w;
  ConvDesc conv;
  ActDesc act;
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  std::size_t algo_bytes = 0;
  // Batch chunking (make_plan): the descriptors hold `batch` samples and run() calls
  // cuDNN `chunks` times, `x_chunk_bytes` / `y_chunk_bytes` apart.
  int64_t chunks = 1;
  std::size_t x_chunk_bytes = 0, y_chunk_bytes = 0;
  mutable std::atomic<bool> fused_ok{true};
  std::size_t workspace() const { return pad_bytes + algo_bytes; }
};

int to_int(int64_t v, const Settings& s, const char* what) {
  XRT_CHECK(v >= 0 && v <= INT_MAX, UnsupportedOperationError, s.where, ": ", what, " ", v,
            " exceeds cuDNN's int range; the cudnn conv kernel cannot run this "
            "shape");
  return static_cast<int>(v);
}

// dims are [N, C, D1..]; nhwc: the memory holds [N, D1.., C] (channels innermost).
TensorDesc tensor_desc(cudnnDataType_t t, const std::vector<int>& dims, bool nhwc = false) {
  cudnnTensorDescriptor_t d = nullptr;
  XRT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
  TensorDesc out(d);
  std::vector<int> strides(dims.size(), 1);
  if (!nhwc || dims.size() < 3) {
    for (std::size_t i = dims.size() - 1; i-- > 0;)
      strides[i] = strides[i + 1] * std::max(dims[i + 1], 1);
  } else {
    int acc = std::max(dims[1], 1);  // C: stride 1
    for (std::size_t i = dims.size(); i-- > 2;) {
      strides[i] = acc;
      acc *= std::max(dims[i], 1);
    }
    strides[0] = acc;
  }
  XRT_CUDNN_CHECK(
      cudnnSetTensorNdDescriptor(d, t, static_cast<int>(dims.size()), dims.data(), strides.data()));
  return out;
}

bool math_allowed(const Settings& s, cudnnMathType_t m) {
  // float32 without TF32: FMA kernels only (cuDNN's default math may use TF32).
  return s.dtype != DType::kFloat32 || s.allow_tf32 || m == CUDNN_FMA_MATH ||
         m == CUDNN_DEFAULT_MATH;
}

// The heuristic's candidates that keep the policy, best first.
std::vector<cudnnConvolutionFwdAlgoPerf_t> candidates(cudnnHandle_t h, const Plan& p,
                                                      const Settings& s, std::size_t limit) {
  int max_count = 0;
  XRT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count));
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<std::size_t>(std::max(max_count, 1)));
  int n = 0;
  XRT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, p.x.get(), p.w.get(), p.conv.get(),
                                                         p.y.get(), max_count, &n, perf.data()));
  std::vector<cudnnConvolutionFwdAlgoPerf_t> out;
  for (int i = 0; i < n; ++i) {
    const auto& r = perf[static_cast<std::size_t>(i)];
    if (r.status != CUDNN_STATUS_SUCCESS || !math_allowed(s, r.mathType)) continue;
    if (r.determinism != CUDNN_DETERMINISTIC) continue;  // KernelDef says deterministic
    if (limit > 0 && r.memory + p.pad_bytes > limit) continue;
    if (std::any_of(out.begin(), out.end(), [&](const auto& o) { return o.algo == r.algo; }))
      continue;
    out.push_back(r);
  }
  return out;
}

void set_math(const Plan& p, const Settings& s, cudnnMathType_t m) {
  const bool fma = s.dtype == DType::kFloat32 && !s.allow_tf32;
  XRT_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.get(), fma ? CUDNN_FMA_MATH : m));
}

// Descriptors for X/W shapes x/w (and the output shape conv_geometry gives),
// then the algorithm (named, or the heuristic's first under `limit` bytes, 0 =
// none).
std::shared_ptr<Plan> make_batch_plan(cudnnHandle_t h, const Settings& s, const Shape& x,
                                      const Shape& w, std::size_t limit) {
  const ops::Spatial sp = ops::conv_geometry(s.attrs, x, w);
  auto p = std::make_shared<Plan>();
  const cudnnDataType_t t = data_type(s.dtype);
  // Spatial dims for cuDNN: at least 2 (a 1-D conv is a 2-D one of height 1).
  std::vector<int64_t> in = sp.in, out = sp.out, k = sp.k, st = sp.s, dl = sp.d, pb = sp.pb,
                       pe = sp.pe;
  if (sp.rank() == 1) {
    in.insert(in.begin(), 1), out.insert(out.begin(), 1), k.insert(k.begin(), 1);
    st.insert(st.begin(), 1), dl.insert(dl.begin(), 1), pb.insert(pb.begin(), 0),
        pe.insert(pe.begin(), 0);
  }
  const std::size_t nd = in.size();
  std::vector<int> xd = {to_int(x[0], s, "batch"), to_int(x[1], s, "channels")};
  std::vector<int> wd = {to_int(w[0], s, "output channels"), to_int(w[1], s, "channels per group")};
  std::vector<int> yd = {xd[0], wd[0]}, pad(nd), stride(nd), dil(nd);
  std::vector<int64_t> padded_in(nd);
  for (std::size_t i = 0; i < nd; ++i) {
    const int64_t sym = std::min(pb[i], pe[i]);
    padded_in[i] = in[i] + (pb[i] - sym) + (pe[i] - sym);
    p->explicit_pad = p->explicit_pad || pb[i] != pe[i];
    xd.push_back(to_int(padded_in[i], s, "padded input size"));
    wd.push_back(to_int(k[i], s, "kernel size"));
    yd.push_back(to_int(out[i], s, "output size"));
    pad[i] = to_int(sym, s, "pad");
    stride[i] = to_int(st[i], s, "stride");
    dil[i] = to_int(dl[i], s, "dilation");
  }
  int64_t x_numel = 1, y_numel = 1;
  for (int v : xd) x_numel *= v;
  for (int v : yd) y_numel *= v;
  to_int(x_numel, s, "input element count");
  to_int(y_numel, s, "output element count");
  p->batch = yd[0];
  p->out_channels = yd[1];
  p->x_chunk_bytes = static_cast<std::size_t>(sp.in_size() * x[1]) * dtype_size(s.dtype) *
                     static_cast<std::size_t>(x[0]);
  p->y_chunk_bytes = static_cast<std::size_t>(y_numel) * dtype_size(s.dtype);
  p->out_inner = yd[1] > 0 && yd[0] > 0 ? y_numel / (yd[0] * static_cast<int64_t>(yd[1])) : 0;
  if (p->explicit_pad) {
    cuda_ops::PadIndex& ix = p->pad;
    ix.rank = static_cast<int>(x.size());
    ix.numel = x_numel;
    ix.in_dims[0] = ix.out_dims[0] = x[0];
    ix.in_dims[1] = ix.out_dims[1] = x[1];
    for (std::size_t i = 0; i < sp.in.size(); ++i) {
      const std::size_t j = i + nd - sp.in.size();  // skip the inserted 1-D height
      ix.in_dims[2 + i] = sp.in[i];
      ix.out_dims[2 + i] = padded_in[j];
      ix.begin[2 + i] = pb[j] - std::min(pb[j], pe[j]);
    }
    const std::size_t bytes = static_cast<std::size_t>(x_numel) * dtype_size(s.dtype);
    p->pad_bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  }
  XRT_CHECK(!s.nhwc || !p->explicit_pad, UnsupportedOperationError, s.where,
            ": the channels-last cudnn conv takes symmetric pads only");
  p->x = tensor_desc(t, xd, s.nhwc);
  p->y = tensor_desc(t, yd, s.nhwc);
  std::vector<int> bd(yd.size(), 1);
  bd[1] = yd[1];
  p->bias = tensor_desc(t, bd);
  cudnnFilterDescriptor_t fd = nullptr;
  XRT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&fd));
  p->w.reset(fd);
  XRT_CUDNN_CHECK(cudnnSetFilterNdDescriptor(fd, t, s.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                             static_cast<int>(wd.size()), wd.data()));
  cudnnConvolutionDescriptor_t cd = nullptr;
  XRT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&cd));
  p->conv.reset(cd);
  // float32 accumulation for every dtype (fp16/bf16: cuDNN's pseudo-half
  // configs).
  XRT_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(cd, static_cast<int>(nd), pad.data(),
                                                  stride.data(), dil.data(),
                                                  CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  XRT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(cd, to_int(s.attrs.group, s, "group")));
  set_math(*p, s, s.dtype == DType::kFloat32 ? CUDNN_DEFAULT_MATH : CUDNN_TENSOR_OP_MATH);
  std::vector<int> check(yd.size());
  XRT_CUDNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(
      cd, p->x.get(), fd, static_cast<int>(check.size()), check.data()));
  XRT_CHECK(check == yd, InvalidArgumentError, s.where,
            ": cuDNN's output shape differs from conv_geometry's (a cudnn conv "
            "kernel bug; pin "
            "another conv kernel)");
  cudnnActivationDescriptor_t ad = nullptr;
  XRT_CUDNN_CHECK(cudnnCreateActivationDescriptor(&ad));
  p->act.reset(ad);
  // Relu, or identity for a bias alone (cuDNN takes identity with the implicit
  // precomputed GEMM algorithm only: run() fuses a lone bias when that one was chosen).
  XRT_CUDNN_CHECK(cudnnSetActivationDescriptor(
      ad, s.relu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY, CUDNN_NOT_PROPAGATE_NAN, 0.0));

  // fp16/bf16 convolutions run with tensor-op math whichever way the algorithm was
  // found (heuristic, pin, tuning or a loaded plan), so a plan loaded by algorithm name
  // computes what its compile computed; fp32 math follows the policy (set_math).
  const bool rule_math = s.dtype != DType::kFloat32 || !s.allow_tf32;
  const cudnnMathType_t ruled = CUDNN_TENSOR_OP_MATH;
  if (!s.algorithm.empty() && rule_math) {
    // Named: no heuristic query (it cost ~5 ms a convolution, most of a conv net's plan
    // load); cuDNN's workspace query refuses an algorithm that cannot run this case.
    const AlgoName* a = std::find_if(std::begin(kAlgos), std::end(kAlgos),
                                     [&](const AlgoName& n) { return s.algorithm == n.name; });
    XRT_CHECK(a != std::end(kAlgos), InvalidArgumentError, s.where,
              ": unknown cudnn conv algorithm '", s.algorithm, "'; known: ", algo_names());
    p->algo = a->algo;
    set_math(*p, s, ruled);
    const cudnnStatus_t st = cudnnGetConvolutionForwardWorkspaceSize(
        h, p->x.get(), fd, cd, p->y.get(), p->algo, &p->algo_bytes);
    XRT_CHECK(st == CUDNN_STATUS_SUCCESS, UnsupportedOperationError, s.where,
              ": cudnn conv algorithm '", s.algorithm, "' does not run this case (",
              cudnnGetErrorString(st), "); re-tune or unpin it, or recompile the plan");
    return p;
  }
  if (!s.algorithm.empty()) {
    const AlgoName* a = std::find_if(std::begin(kAlgos), std::end(kAlgos),
                                     [&](const AlgoName& n) { return s.algorithm == n.name; });
    XRT_CHECK(a != std::end(kAlgos), InvalidArgumentError, s.where,
              ": unknown cudnn conv algorithm '", s.algorithm, "'; known: ", algo_names());
    p->algo = a->algo;
    const auto cands = candidates(h, *p, s, 0);
    auto c =
        std::find_if(cands.begin(), cands.end(), [&](const auto& r) { return r.algo == a->algo; });
    XRT_CHECK(c != cands.end(), UnsupportedOperationError, s.where, ": cudnn conv algorithm '",
              s.algorithm, "' does not run this case under the policy (deterministic, ",
              s.allow_tf32 ? "TF32 allowed" : "no TF32", "); re-tune or unpin it");
    set_math(*p, s, c->mathType);
  } else {
    const auto cands = candidates(h, *p, s, limit);
    XRT_CHECK(!cands.empty(), UnsupportedOperationError, s.where,
              ": cuDNN has no deterministic algorithm for this convolution",
              limit ? " within the workspace limit of " + std::to_string(limit) + " bytes" : "",
              p->pad_bytes ? " (the zero-padded input copy of its asymmetric pads alone takes " +
                                 std::to_string(p->pad_bytes) + " bytes)"
                           : "",
              "; raise the limit or choose another conv kernel");
    p->algo = cands.front().algo;
    set_math(*p, s, rule_math ? ruled : cands.front().mathType);
  }
  XRT_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, p->x.get(), fd, cd, p->y.get(),
                                                          p->algo, &p->algo_bytes));
  return p;
}

// A workspace larger than the tensors it works on sets a plan's peak memory: cuDNN's
// first choice for wav2vec2's second feature convolution (batch 8) takes 40.9 MB next
// to its 26.2 MB input and 13.1 MB output. Such a convolution runs the same algorithm
// over halves (quarters, ...) of the batch instead, until the workspace fits within the
// tensors' bytes, while a chunk's output stays at least kMinChunkOutputBytes (large
// enough to fill the GPU, so the chunks cost about what the whole did). The rule reads
// only the algorithm and the shapes, so a plan loaded by algorithm name chunks alike.
constexpr std::size_t kChunkFromWorkspace = 16u << 20;
constexpr std::size_t kMinChunkOutputBytes = 4u << 20;

std::shared_ptr<const Plan> make_plan(cudnnHandle_t h, const Settings& s, const Shape& x,
                                      const Shape& w, std::size_t limit) {
  std::shared_ptr<Plan> whole = make_batch_plan(h, s, x, w, limit);
  const std::size_t tensors = whole->x_chunk_bytes + whole->y_chunk_bytes;
  if (whole->algo_bytes < kChunkFromWorkspace || whole->algo_bytes <= tensors) return whole;
  Settings same = s;
  same.algorithm = algo_name(whole->algo);
  std::shared_ptr<Plan> best = whole;
  for (int64_t b = x[0]; b % 2 == 0;) {
    b /= 2;
    Shape xb = x;
    xb[0] = b;
    std::shared_ptr<Plan> part;
    try {
      part = make_batch_plan(h, same, xb, w, 0);
    } catch (const XpuRuntimeError&) {
      break;  // the algorithm does not take this batch: keep the last that ran
    }
    if (part->y_chunk_bytes < kMinChunkOutputBytes || part->workspace() >= best->workspace()) break;
    part->chunks = x[0] / b;
    best = part;
    if (part->algo_bytes <= tensors) break;
  }
  return best;
}

bool known(const Shape& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](int64_t d) { return d >= 0; });
}

// The weights of a channels-last convolution in cuDNN's KRSC layout: ONNX's
// [M, C/g, k..] transposed once on the host and kept on the device.
class KrscWeights {
 public:
  KrscWeights(const graph::HostTensor& w, int device) {
    const Shape& s = w.shape;
    const int64_t m = s[0], c = s[1], es = static_cast<int64_t>(dtype_size(w.dtype));
    int64_t k = 1;
    for (std::size_t i = 2; i < s.size(); ++i) k *= s[i];
    std::vector<unsigned char> host(static_cast<std::size_t>(m * c * k * es));
    const auto* src = static_cast<const unsigned char*>(w.data);
    for (int64_t o = 0; o < m; ++o)
      for (int64_t ci = 0; ci < c; ++ci)
        for (int64_t kk = 0; kk < k; ++kk)
          std::copy_n(src + ((o * c + ci) * k + kk) * es, es,
                      host.data() + ((o * k + kk) * c + ci) * es);
    buffer_ = std::make_unique<cuda_ops::DeviceBuffer>(host.data(), host.size(), device);
  }
  const void* data() const { return buffer_->data(); }

 private:
  std::unique_ptr<cuda_ops::DeviceBuffer> buffer_;  // the caching allocator's: counted in stats
};

class ConvPrepared final : public PreparedKernel {
 public:
  ConvPrepared(Settings s, Shape x, Shape w, std::shared_ptr<const Plan> plan,
               std::shared_ptr<const KrscWeights> krsc = nullptr)
      : s_(std::move(s)),
        x_(std::move(x)),
        w_(std::move(w)),
        plan_(std::move(plan)),
        krsc_(std::move(krsc)) {}

  std::size_t workspace_bytes() const override { return plan_ ? plan_->workspace() : 0; }
  // Channels-last: W is read from the KRSC copy only (the plan's OIHW one stays off
  // the device).
  bool packs_constant(std::size_t input) const override { return input == 1 && krsc_ != nullptr; }
  std::string chosen_algorithm() const override {
    return plan_ ? std::string(algo_name(plan_->algo)) : std::string();
  }

  void run(const KernelArgs& a) const override {
    XRT_CHECK(a.inputs.size() >= 2 && !a.outputs.empty(), InvalidArgumentError, s_.where,
              ": cudnn conv needs X, W and one output");
    const TensorArg& y = a.outputs[0];
    if (y.numel() == 0) return;
    cuda::DeviceGuard guard(s_.device);
    HandleLease lease(s_.device);
    cudnnHandle_t h = lease.get();
    XRT_CUDNN_CHECK(cudnnSetStream(h, static_cast<cudaStream_t>(a.stream)));
    std::shared_ptr<const Plan> plan = plan_;
    if (!plan || a.inputs[0].shape != x_ || a.inputs[1].shape != w_) {
      // A dynamic-shape step: descriptors and algorithm for these shapes,
      // within the workspace this run was given.
      plan = make_plan(h, s_, logical_x(a.inputs[0].shape, s_.nhwc), a.inputs[1].shape,
                       a.workspace_bytes > 0 ? a.workspace_bytes : 1);
    }
    XRT_CHECK(a.workspace_bytes >= plan->workspace() && (plan->workspace() == 0 || a.workspace),
              InvalidArgumentError, s_.where, ": cudnn conv needs ", plan->workspace(),
              " bytes of workspace, the run gave ", a.workspace_bytes);
    char* ws = static_cast<char*>(a.workspace);
    void* algo_ws = plan->algo_bytes ? ws + plan->pad_bytes : nullptr;
    const void* bias = s_.bias && a.inputs.size() > 2 ? a.inputs[2].data : nullptr;
    const void* z = s_.residual && a.inputs.size() > 3 ? a.inputs[3].data : nullptr;
    XRT_CHECK(!s_.residual || z != nullptr, InvalidArgumentError, s_.where,
              ": the fused residual (input 3) is missing");
    const float one = 1.f, zero = 0.f;
    const void* w = krsc_ ? krsc_->data() : a.inputs[1].data;
    // Chunk c of the batch (one chunk unless make_plan split a large workspace).
    auto x_of = [&](int64_t c) {
      const void* x = static_cast<const char*>(a.inputs[0].data) + c * plan->x_chunk_bytes;
      if (!plan->explicit_pad) return x;
      cuda_ops::launch_pad(dtype_size(s_.dtype), plan->pad, cuda_ops::PadMode::kConstant, x,
                           nullptr, 0, ws, a.stream);
      return static_cast<const void*>(ws);
    };
    auto at = [&](const void* base, int64_t c) {
      return static_cast<char*>(const_cast<void*>(base)) + c * plan->y_chunk_bytes;
    };
    const bool fusable =
        s_.relu || plan->algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
    int64_t fused = 0;  // chunks done by the fused call
    if (bias && fusable && plan->fused_ok.load(std::memory_order_relaxed)) {
      for (; fused < plan->chunks; ++fused) {
        void* yc = at(y.data, fused);
        const cudnnStatus_t st = cudnnConvolutionBiasActivationForward(
            h, &one, plan->x.get(), x_of(fused), plan->w.get(), w, plan->conv.get(), plan->algo,
            algo_ws, plan->algo_bytes, z ? &one : &zero, plan->y.get(), z ? at(z, fused) : yc,
            plan->bias.get(), bias, plan->act.get(), plan->y.get(), yc);
        if (st == CUDNN_STATUS_SUCCESS) continue;
        if (!refused(st))
          throw_cudnn("cudnnConvolutionBiasActivationForward", st, __FILE__, __LINE__);
        plan->fused_ok.store(false, std::memory_order_relaxed);  // the unfused path from now on
        break;
      }
      if (fused == plan->chunks) return;
    }
    const std::size_t rest = static_cast<std::size_t>(plan->chunks - fused) * plan->y_chunk_bytes;
    if (z && z != y.data)
      XRT_CUDA_CHECK(cudaMemcpyAsync(at(y.data, fused), at(z, fused), rest,
                                     cudaMemcpyDeviceToDevice,
                                     static_cast<cudaStream_t>(a.stream)));
    for (int64_t c = fused; c < plan->chunks; ++c)
      XRT_CUDNN_CHECK(cudnnConvolutionForward(
          h, &one, plan->x.get(), x_of(c), plan->w.get(), w, plan->conv.get(), plan->algo, algo_ws,
          plan->algo_bytes, z ? &one : &zero, plan->y.get(), at(y.data, c)));
    // Channels-last: every output row of C channels is one "batch" of inner size 1.
    const int64_t rows = plan->batch * (plan->chunks - fused);
    if (bias || s_.relu)
      launch_bias_relu(s_.dtype, at(y.data, fused), bias, s_.nhwc ? rows * plan->out_inner : rows,
                       plan->out_channels, s_.nhwc ? 1 : plan->out_inner, s_.relu, a.stream);
  }

 private:
  Settings s_;
  Shape x_, w_;
  std::shared_ptr<const Plan> plan_;  // null: the prepared shapes were placeholders
  std::shared_ptr<const KrscWeights> krsc_;  // channels-last only
};

const std::vector<DType> kTypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

// An optional input (bias, residual) as the context gives it: absent when
// missing or a placeholder spec (the engine passes an empty-shaped one; Conv's
// B is 1-D).
bool spec_present(const OpContext& ctx, std::size_t i) {
  return i < ctx.inputs.size() && !ctx.inputs[i].shape.empty() && ctx.inputs[i].numel() != 0;
}

// The node a context describes, its attributes from their text (supports() and
// the unprepared path).
graph::Node node_of(const OpContext& ctx) {
  graph::Node n;
  n.name = ctx.node;
  n.op_type = "Conv";
  for (const auto& [k, v] : ctx.attrs) n.attrs[k] = graph::Attr::of_string(v);
  return n;
}

Settings settings_of(const PrepareContext& pc) {
  Settings s;
  s.where = pc.node->where();
  s.attrs = ops::ConvAttrs::from_node(*pc.node);
  const ops::Epilogue e = ops::Epilogue::from_node(*pc.node);
  XRT_CHECK(!e.has_activation() || e.activation_op == "Relu", UnsupportedOperationError, s.where,
            ": the cudnn conv kernel fuses only Relu, not ", e.activation_op,
            "; leave the activation unfused or choose another conv kernel");
  s.dtype = pc.ctx->inputs[0].dtype;
  s.bias = cuda_ops::has_input(pc, 2) && spec_present(*pc.ctx, 2);
  s.residual = e.residual;
  XRT_CHECK(!s.residual || (cuda_ops::has_input(pc, 3) && pc.ctx->inputs.size() > 3),
            InvalidModelError, s.where, ": a fused residual (_sum) needs input 3");
  s.relu = e.has_activation();
  s.allow_tf32 = pc.ctx->allow_tf32;
  s.nhwc = pc.ctx->op == "conv_nhwc";
  s.algorithm = pc.algorithm;
  s.device = pc.ctx->device.index;
  return s;
}

class CudnnConv final : public Kernel {
 public:
  explicit CudnnConv(bool nhwc) : Kernel(make_def(nhwc)), nhwc_(nhwc) {}

  Support supports(const OpContext& ctx) const override {
    // The layout pass asks about a channels-last conv before it has an output value.
    const bool out = !ctx.outputs.empty();
    Support s = cuda_ops::first_refusal(
        {cuda_ops::require_arity(ctx, 2, out ? 1 : 0), cuda_ops::require_dense(ctx)});
    if (!s.ok) return s;
    if (nhwc_) {
      if (ctx.inputs[0].shape.size() != 4 || ctx.inputs[1].shape.size() != 4)
        return Support::no(reason::kShapeUnsupported,
                           "the channels-last cudnn conv runs 2-D convolutions (X [N, H, W, C])");
      if (ctx.attr_int("_swish", 0) != 0)
        return Support::no(reason::kAttributeUnsupported,
                           "no swish post-op in cuDNN's legacy convolution");
      // Depthwise convolutions are not cuDNN's here: its legacy channels-last
      // depthwise kernels were 1.3-2x slower than its NCHW path on the H200
      // (MobileNetV3, EfficientNet-B0, ConvNeXt-T in fp16), and the NCHW path an order
      // of magnitude off the memory bound. The cuda_depthwise kernel runs them.
      if (ctx.inputs[1].shape[1] == 1 && ctx.attr_int("group", 1) > 1)
        return Support::no(reason::kShapeUnsupported,
                           "a depthwise convolution (the cuda_depthwise kernel runs those)");
    }
    const DType t = ctx.inputs[0].dtype;
    if (std::find(kTypes.begin(), kTypes.end(), t) == kTypes.end())
      return Support::no(
          reason::kDtypeUnsupported,
          "X is " + std::string(dtype_name(t)) + "; cudnn conv takes float32, float16, bfloat16");
    const char* roles[] = {"X", "W", "B", "the residual"};
    for (std::size_t i = 1; i < std::min<std::size_t>(ctx.inputs.size(), 4); ++i) {
      if (i >= 2 && !spec_present(ctx, i)) continue;
      if (ctx.inputs[i].dtype != t)
        return Support::no(reason::kDtypeUnsupported,
                           std::string(roles[i]) + " is " +
                               std::string(dtype_name(ctx.inputs[i].dtype)) + ", X is " +
                               std::string(dtype_name(t)) + "; cudnn conv needs one dtype");
    }
    if (out && ctx.outputs[0].dtype != t)
      return Support::no(reason::kDtypeUnsupported, "the output dtype differs from X's");
    const Shape x = logical_x(ctx.inputs[0].shape, nhwc_);
    const Shape& w = ctx.inputs[1].shape;
    if (x.size() < 3 || x.size() > 5 || w.size() != x.size())
      return Support::no(reason::kShapeUnsupported,
                         "X and W must both have rank 3-5 (1-3 spatial dims); got ranks " +
                             std::to_string(x.size()) + " and " + std::to_string(w.size()));
    const std::string act = ctx.attr_str("_act", "");
    if (!act.empty() && act != "Relu")
      return Support::no(reason::kAttributeUnsupported,
                         "cuDNN fuses only Relu after a convolution, not " + act);
    if (ctx.attr_int("_sum", 0) != 0) {
      if (!spec_present(ctx, 3))
        return Support::no(reason::kShapeUnsupported, "the fused residual (input 3) is missing");
      if (out && ctx.inputs[3].shape != ctx.outputs[0].shape)
        return Support::no(reason::kShapeUnsupported,
                           "the fused residual must have the output's shape "
                           "(no broadcasting)");
    }
    if (spec_present(ctx, 2) && ctx.inputs[2].shape.size() != 1)
      return Support::no(reason::kShapeUnsupported, "B must be 1-D");
    if (!known(x) || !known(w)) return Support::yes();  // dynamic: checked when prepared
    try {
      const graph::Node n = node_of(ctx);
      const ops::ConvAttrs a = ops::ConvAttrs::from_node(n);
      const int64_t g = a.group;
      if (g < 1 || x[1] != w[1] * g || w[0] % g != 0)
        return Support::no(reason::kShapeUnsupported,
                           "group " + std::to_string(g) + " does not divide X's " +
                               std::to_string(x[1]) + " channels into W's " + std::to_string(w[1]) +
                               " per group with " + std::to_string(w[0]) + " output channels");
      const ops::Spatial sp = ops::conv_geometry(a, x, w);
      if (nhwc_ && sp.pb != sp.pe)
        return Support::no(reason::kAttributeUnsupported,
                           "asymmetric pads (the channels-last cudnn conv takes symmetric ones)");
      if (sp.out_size() * x[0] * w[0] > INT_MAX || sp.in_size() * x[0] * x[1] > INT_MAX)
        return Support::no(reason::kShapeUnsupported,
                           "more than 2^31 elements in X or Y (cuDNN's legacy "
                           "int descriptors)");
      if (w[0] == 0 || w[1] == 0 || sp.k_size() == 0)
        return Support::no(reason::kShapeUnsupported, "an empty filter");
    } catch (const XpuRuntimeError& e) {
      return Support::no(reason::kAttributeUnsupported, e.what());
    }
    return Support::yes();
  }

  PreparedKernelPtr prepare(const PrepareContext& pc) const override {
    XRT_CHECK(pc.ctx != nullptr && pc.node != nullptr, InvalidArgumentError,
              "prepare of conv (cudnn) needs an OpContext and a node");
    XRT_CHECK(pc.ctx->inputs.size() >= 2, InvalidArgumentError, pc.node->where(),
              ": conv needs X and W");
    Settings s = settings_of(pc);
    const Shape& x = pc.ctx->inputs[0].shape;
    const Shape& w = pc.ctx->inputs[1].shape;
    std::shared_ptr<const Plan> plan;
    if (known(x) && known(w)) {
      cuda::DeviceGuard guard(s.device);
      HandleLease lease(s.device);
      plan = make_plan(lease.get(), s, logical_x(x, s.nhwc), w, pc.ctx->workspace_limit_bytes);
    }
    std::shared_ptr<const KrscWeights> krsc;
    if (s.nhwc) {
      XRT_CHECK(pc.constants.size() > 1 && pc.constants[1].defined(), UnsupportedOperationError,
                s.where, ": the channels-last cudnn conv needs constant weights (it keeps them "
                "transposed to cuDNN's KRSC layout); pin KernelPolicy(conv='cudnn') to keep "
                "this model's convolutions NCHW");
      krsc = std::make_shared<KrscWeights>(pc.constants[1], s.device);
    }
    return std::make_shared<ConvPrepared>(std::move(s), x, w, std::move(plan), std::move(krsc));
  }

  // The unprepared path (dispatch API, tuning): prepares for the launch's
  // context and algorithm, then runs once on launch.stream.
  void run(KernelLaunch& launch) const override {
    XRT_CHECK(launch.ctx != nullptr, InvalidArgumentError,
              "conv (cudnn): KernelLaunch without an OpContext");
    const graph::Node node = node_of(*launch.ctx);
    PrepareContext pc;
    pc.ctx = launch.ctx;
    pc.node = &node;
    pc.algorithm = launch.algorithm;
    PreparedKernelPtr prepared = prepare(pc);
    KernelArgs args;
    auto arg = [&](const Tensor& t, const char* role, std::size_t i) {
      if (!t.defined()) return TensorArg{};
      XRT_CHECK(t.device().kind == cuda::kind() && t.is_contiguous(), InvalidArgumentError,
                "conv (cudnn): ", role, " ", i, " must be a dense CUDA tensor, got ", t.str());
      return TensorArg{t.dtype(), t.shape(), t.data_ptr()};
    };
    for (std::size_t i = 0; i < launch.inputs.size(); ++i)
      args.inputs.push_back(arg(launch.inputs[i], "input", i));
    for (std::size_t i = 0; i < launch.outputs.size(); ++i)
      args.outputs.push_back(arg(launch.outputs[i], "output", i));
    args.stream = launch.stream;
    args.workspace = launch.workspace;
    args.workspace_bytes = launch.workspace_bytes;
    prepared->run(args);
  }

  // The tunable algorithms of this case: the heuristic's deterministic
  // candidates under the policy's math and workspace limit (empty without a
  // device).
  std::vector<std::string> algorithms(const OpContext& ctx) const override {
    std::vector<std::string> out;
    try {
      for (const auto& r : ranked(ctx)) out.push_back(algo_name(r.algo));
    } catch (const std::exception&) {
      out.clear();
    }
    return out;
  }

  // The most any of those candidates needs (tuning runs each with this
  // workspace), plus the padded input copy; 0 where no plan can be made
  // (prepare then says why).
  std::size_t workspace_bytes(const OpContext& ctx) const override {
    try {
      std::size_t most = 0;
      for (const auto& r : ranked(ctx, &most)) most = std::max(most, r.memory);
      return most;
    } catch (const std::exception&) {
      return 0;
    }
  }

 private:
  // pad_extra: receives the padded-input bytes (added to every candidate's
  // need).
  std::vector<cudnnConvolutionFwdAlgoPerf_t> ranked(const OpContext& ctx,
                                                    std::size_t* pad_extra = nullptr) const {
    if (!supports(ctx).ok || !known(ctx.inputs[0].shape) || !known(ctx.inputs[1].shape)) return {};
    const graph::Node node = node_of(ctx);
    PrepareContext pc;
    pc.ctx = &ctx;
    pc.node = &node;
    const Settings s = settings_of(pc);
    cuda::DeviceGuard guard(s.device);
    HandleLease lease(s.device);
    auto plan = make_plan(lease.get(), s, logical_x(ctx.inputs[0].shape, s.nhwc),
                          ctx.inputs[1].shape, ctx.workspace_limit_bytes);
    std::vector<cudnnConvolutionFwdAlgoPerf_t> c =
        candidates(lease.get(), *plan, s, ctx.workspace_limit_bytes);
    for (auto& r : c) r.memory += plan->pad_bytes;
    if (pad_extra) *pad_extra = plan->workspace();
    return c;
  }

  static KernelDef make_def(bool nhwc) {
    KernelDef d;
    d.op = nhwc ? "conv_nhwc" : "conv";
    d.name = kName;
    d.provider = "cudnn";
    d.device = ::xpuruntime::cuda::kind();
    d.dtypes = kTypes;
    d.layouts = {"contiguous"};
    d.min_capability = 90;  // the plugin is built for sm_90
    d.priority = 20;
    d.deterministic = true;  // only algorithms cuDNN reports deterministic are chosen
    const std::size_t v = cudnnGetVersion();
    d.description = "cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) +
                    "." + std::to_string(v % 100) +
                    " legacy convolution (1-3 spatial dims, groups, dilations, asymmetric "
                    "pads via "
                    "a padded copy), fp32 accumulation, TF32 only when allowed; fused bias "
                    "+ Relu "
                    "(+ residual) through cudnnConvolutionBiasActivationForward" +
                    (nhwc ? std::string("; channels-last: 2-D, symmetric pads, constant weights "
                                        "kept in KRSC")
                          : std::string());
    return d;
  }

  bool nhwc_;
};

}  // namespace
}  // namespace xpuruntime::cudnn_conv

namespace xpuruntime {

void register_cudnn_conv_kernels(KernelRegistry& registry) {
  registry.register_kernel(std::make_shared<cudnn_conv::CudnnConv>(/*nhwc=*/false),
                           /*replace=*/true);
  registry.register_kernel(std::make_shared<cudnn_conv::CudnnConv>(/*nhwc=*/true),
                           /*replace=*/true);
}

}  // namespace xpuruntime
