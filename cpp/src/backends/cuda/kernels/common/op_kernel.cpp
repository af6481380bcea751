#include "backends/cuda/kernels/common/op_kernel.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kind.h"
#include "core/half_float.h"
#include "xpuruntime/error.h"
#include "xpuruntime/tensor.h"

namespace xpuruntime::cuda_ops {

const std::vector<DType> kFloatTypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                                        DType::kFloat64};
const std::vector<DType> kSignedTypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                                         DType::kFloat64, DType::kInt8,    DType::kInt16,
                                         DType::kInt32,   DType::kInt64};
const std::vector<DType> kNumericTypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                                          DType::kFloat64, DType::kInt8,    DType::kInt16,
                                          DType::kInt32,   DType::kInt64,   DType::kUInt8};
const std::vector<DType> kAllTypes = {
    DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64, DType::kInt8,
    DType::kInt16,   DType::kInt32,   DType::kInt64,    DType::kUInt8,   DType::kBool};
const std::vector<DType> kIndexTypes = {DType::kInt32, DType::kInt64};

namespace {

class FnPrepared final : public PreparedKernel {
 public:
  FnPrepared(RunFn run, std::size_t ws) : run_(std::move(run)), ws_(ws) {}
  void run(const KernelArgs& args) const override { run_(args); }
  std::size_t workspace_bytes() const override { return ws_; }

 private:
  RunFn run_;
  std::size_t ws_;
};

std::string dtype_list(const std::vector<DType>& v) {
  std::string s;
  for (DType t : v) s += (s.empty() ? "" : ", ") + std::string(dtype_name(t));
  return s;
}

}  // namespace

Support CudaOpKernel::supports(const OpContext& ctx) const {
  return supports_ ? supports_(ctx) : Support::yes();
}

PreparedKernelPtr CudaOpKernel::prepare(const PrepareContext& pc) const {
  XRT_CHECK(pc.ctx != nullptr && pc.node != nullptr, InvalidArgumentError, "prepare of ", def().op,
            " (cuda) needs an OpContext and a node");
  return prepare_(pc);
}

void CudaOpKernel::run(KernelLaunch& launch) const {
  XRT_CHECK(launch.ctx != nullptr, InvalidArgumentError, def().op,
            " (cuda): KernelLaunch without an OpContext");
  graph::Node node;
  node.name = launch.ctx->node;
  node.op_type = launch.ctx->op;
  for (const auto& [k, v] : launch.ctx->attrs) node.attrs[k] = graph::Attr::of_string(v);
  PrepareContext pc;
  pc.ctx = launch.ctx;
  pc.node = &node;
  pc.algorithm = launch.algorithm;
  PreparedKernelPtr prepared = prepare(pc);
  KernelArgs args;
  auto arg = [&](const Tensor& t, const char* role, std::size_t i) {
    if (!t.defined()) return TensorArg{};
    XRT_CHECK(t.device().kind == cuda::kind() && t.is_contiguous(), InvalidArgumentError, def().op,
              " (cuda): ", role, " ", i, " must be a dense CUDA tensor, got ", t.str());
    return TensorArg{t.dtype(), t.shape(), t.data_ptr()};
  };
  for (std::size_t i = 0; i < launch.inputs.size(); ++i)
    args.inputs.push_back(arg(launch.inputs[i], "input", i));
  for (std::size_t i = 0; i < launch.outputs.size(); ++i)
    args.outputs.push_back(arg(launch.outputs[i], "output", i));
  args.stream = launch.stream;
  args.workspace = launch.workspace;
  args.workspace_bytes = launch.workspace_bytes;
  XRT_CHECK(args.workspace_bytes >= prepared->workspace_bytes(), InvalidArgumentError, def().op,
            " (cuda): needs ", prepared->workspace_bytes(), " bytes of workspace, got ",
            args.workspace_bytes);
  prepared->run(args);
}

PreparedKernelPtr make_prepared(RunFn run, std::size_t workspace_bytes) {
  return std::make_shared<FnPrepared>(std::move(run), workspace_bytes);
}

void add_kernel(KernelRegistry& registry, const std::string& op, std::vector<DType> dtypes,
                const std::string& description, SupportsFn supports, PrepareFn prepare) {
  KernelDef def;
  def.op = op;
  def.name = kKernelName;
  def.provider = kProvider;
  def.device = ::xpuruntime::cuda::kind();
  def.dtypes = std::move(dtypes);
  def.layouts = {"contiguous"};
  // The plugin is built for sm_90 (CMAKE_CUDA_ARCHITECTURES 90): older devices have
  // no image of these kernels.
  def.min_capability = 90;
  def.deterministic = true;  // no atomics: every kernel here gives the same bits run to run
  def.description = description;
  registry.register_kernel(
      std::make_shared<CudaOpKernel>(std::move(def), std::move(supports), std::move(prepare)),
      /*replace=*/true);
}

Support require_dense(const OpContext& ctx) {
  for (std::size_t i = 0; i < ctx.inputs.size(); ++i) {
    if (ctx.inputs[i].layout() != "contiguous")
      return Support::no(reason::kLayoutUnsupported, "input " + std::to_string(i) + " is " +
                                                         ctx.inputs[i].layout() +
                                                         "; the CUDA kernels take dense tensors");
  }
  for (std::size_t i = 0; i < ctx.outputs.size(); ++i) {
    if (ctx.outputs[i].layout() != "contiguous")
      return Support::no(reason::kLayoutUnsupported, "output " + std::to_string(i) + " is " +
                                                         ctx.outputs[i].layout() +
                                                         "; the CUDA kernels write dense tensors");
  }
  return Support::yes();
}

Support require_dtype(const OpContext& ctx, std::size_t i, const std::vector<DType>& dtypes,
                      const char* role) {
  if (i >= ctx.inputs.size()) return Support::yes();
  if (std::find(dtypes.begin(), dtypes.end(), ctx.inputs[i].dtype) != dtypes.end())
    return Support::yes();
  return Support::no(reason::kDtypeUnsupported,
                     std::string(role) + " (input " + std::to_string(i) + ") is " +
                         std::string(dtype_name(ctx.inputs[i].dtype)) + "; the CUDA " + ctx.op +
                         " kernel takes " + dtype_list(dtypes));
}

Support require_arity(const OpContext& ctx, std::size_t inputs, std::size_t outputs) {
  if (ctx.inputs.size() < inputs || ctx.outputs.size() < outputs)
    return Support::no(reason::kShapeUnsupported,
                       ctx.op + " needs at least " + std::to_string(inputs) + " inputs and " +
                           std::to_string(outputs) + " outputs, the call has " +
                           std::to_string(ctx.inputs.size()) + " and " +
                           std::to_string(ctx.outputs.size()));
  return Support::yes();
}

Support first_refusal(std::initializer_list<Support> checks) {
  for (const Support& s : checks)
    if (!s.ok) return s;
  return Support::yes();
}

const graph::HostTensor* constant_input(const PrepareContext& pc, std::size_t i) {
  if (i < pc.constants.size() && pc.constants[i].defined()) return &pc.constants[i];
  return nullptr;
}

uint64_t encode_scalar(DType t, double v) {
  auto sat = [v](double lo, double hi) {
    return std::isnan(v) ? 0.0 : std::clamp(std::trunc(v), lo, hi);
  };
  uint64_t bits = 0;
  auto put = [&bits](auto x) { std::memcpy(&bits, &x, sizeof(x)); };
  switch (t) {
    case DType::kFloat32:
      put(static_cast<float>(v));
      break;
    case DType::kFloat64:
      put(v);
      break;
    case DType::kFloat16:
      put(matmul::float_to_half(static_cast<float>(v)));
      break;
    case DType::kBFloat16:
      put(matmul::float_to_bf16(static_cast<float>(v)));
      break;
    case DType::kInt8:
      put(static_cast<int8_t>(sat(-128, 127)));
      break;
    case DType::kUInt8:
      put(static_cast<uint8_t>(sat(0, 255)));
      break;
    case DType::kInt16:
      put(static_cast<int16_t>(sat(-32768, 32767)));
      break;
    case DType::kInt32:
      put(static_cast<int32_t>(sat(-2147483648.0, 2147483647.0)));
      break;
    case DType::kInt64:
      // 2^63 does not fit: the largest double below it is the upper clamp.
      put(v >= 9.2233720368547758e18
              ? INT64_MAX
              : static_cast<int64_t>(sat(-9.2233720368547758e18, 9.2233720368547748e18)));
      break;
    case DType::kBool:
      put(static_cast<uint8_t>(v != 0 ? 1 : 0));
      break;
    default:
      XRT_THROW(UnsupportedOperationError, "no fill value encoding for ", dtype_name(t));
  }
  return bits;
}

std::string op_key_of(const std::string& op_type) {
  std::string k = op_type;
  std::transform(k.begin(), k.end(), k.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return k;
}

std::string where(const PrepareContext& pc) { return pc.node->where() + " on cuda"; }

bool has_input(const PrepareContext& pc, std::size_t i) {
  if (i < pc.node->inputs.size()) return pc.node->inputs[i] >= 0;
  return i < pc.ctx->inputs.size();
}

IntsInput::IntsInput(const PrepareContext& pc, std::size_t index, const char* role)
    : index_(index), present_(has_input(pc, index)), what_(where(pc)), role_(role) {
  if (const graph::HostTensor* t = constant_input(pc, index)) constant_ = t->to_ints();
}

std::vector<int64_t> IntsInput::get(const KernelArgs& args) const {
  if (!present_) return {};
  if (constant_) return *constant_;
  XRT_CHECK(index_ < args.inputs.size() && args.inputs[index_].present(), InvalidArgumentError,
            what_, ": ", role_, " (input ", index_, ") is missing at run time");
  const TensorArg& t = args.inputs[index_];
  const cudaStream_t stream = static_cast<cudaStream_t>(args.stream);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  XRT_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  XRT_CHECK(
      capture == cudaStreamCaptureStatusNone, UnsupportedOperationError, what_, ": ", role_,
      " (input ", index_,
      ") is computed at run time and must be read on the host, which a "
      "CUDA graph capture forbids; make it a constant of the model or run without cuda_graph");
  std::vector<unsigned char> bytes(t.nbytes());
  if (!bytes.empty()) {
    XRT_CUDA_CHECK(
        cudaMemcpyAsync(bytes.data(), t.data, bytes.size(), cudaMemcpyDeviceToHost, stream));
    XRT_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  const graph::HostTensor h = graph::HostTensor::wrap(t.dtype, t.shape, bytes.data(), nullptr);
  return h.to_ints();
}

}  // namespace xpuruntime::cuda_ops
