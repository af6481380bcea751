// The CUDA execution provider: the one provider (xpuruntime/device_provider.h) over
// the CUDA backend, with what differs on CUDA: which fusions pay and the environment
// a plan depends on (GPU architecture, CUDA runtime, cuBLASLt and cuDNN versions).
#include "backends/cuda/cuda_provider.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kind.h"
#include "xpuruntime/device_provider.h"
#include "xpuruntime/error.h"
#include "xpuruntime/kernel_registry.h"

namespace xpuruntime::cuda {
namespace {

// cudnnGetVersion() of the cuDNN this process loaded with the plugin, or "none".
// Looked up rather than called: the plugin builds without cuDNN where CMake found
// none (conv_cudnn_absent.cpp), and then the library is not linked.
std::string cudnn_version() {
  void* lib = dlopen("libcudnn.so.9", RTLD_LAZY | RTLD_NOLOAD);
  if (lib == nullptr) return "none";
  using GetVersion = std::size_t (*)();
  auto fn = reinterpret_cast<GetVersion>(dlsym(lib, "cudnnGetVersion"));
  const std::string v = fn != nullptr ? std::to_string(fn()) : std::string("none");
  dlclose(lib);
  return v;
}

}  // namespace

std::shared_ptr<graph::ExecutionProvider> make_cuda_provider(CudaBackend &backend) {
  graph::DeviceTraits traits;
  // What a CUDA plan's kernels were chosen for: the GPU architecture (kernels are
  // built and algorithms tuned per architecture) and the versions of the libraries
  // whose algorithm ids and heuristics a plan records (cuBLASLt, cuDNN) or whose
  // kernels it runs (the CUDA runtime). A plan loads only where all four match.
  traits.environment = [](int capability) -> std::map<std::string, std::string> {
    int runtime = 0;
    XRT_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    return {{"gpu_arch", "sm_" + std::to_string(capability)},
            {"cuda_runtime", std::to_string(runtime)},
            {"cublaslt", std::to_string(cublasLtGetVersion())},
            {"cudnn", cudnn_version()}};
  };
  // An offline preview's target: "sm_90", "sm_90a", "90" or "9.0" (the capability
  // the kernels' supports() see); "" (this machine's GPU) never comes here.
  traits.target_capability = [](const std::string &target) {
    std::string t = target;
    if (t.rfind("sm_", 0) == 0 || t.rfind("sm", 0) == 0) t = t.substr(t[2] == '_' ? 3 : 2);
    if (!t.empty() && t.back() == 'a') t.pop_back();  // sm_90a: the arch-specific target
    if (const auto dot = t.find('.'); dot != std::string::npos) t.erase(dot, 1);
    const bool digits = t.size() >= 2 && t.size() <= 3 &&
                        std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
    XRT_CHECK(digits && std::stoi(t) >= 50, InvalidArgumentError, "unknown CUDA target '",
              target, "': name a GPU architecture as sm_XY (e.g. sm_90 for H100/H200, sm_80 ",
              "for A100, sm_89 for L4/L40)");
    return std::stoi(t);
  };
  // Batchnorm folding rewrites weights only. Elementwise chains fuse where the
  // CUDA FusedElementwise kernel (NVRTC) is registered. Epilogues: those
  // takes_epilogue names, which the GEMM and cuDNN kernels apply.
  traits.fusions = [] {
    graph::FusionSupport f;
    f.fold_batchnorm = true;
    f.epilogues = true;
    f.single_pixel_conv_gemms = true;
    f.elementwise_in_place = true;  // unary/binary/NVRTC chains: thread i reads then writes i
    f.elementwise_chains =
        !KernelRegistry::instance().list("fusedelementwise", cuda::kind()).empty();
    return f;
  };
  // cuBLASLt's epilogues for MatMul/Gemm: a bias row, a residual (read as the GEMM's C
  // with beta 1), Relu, and Gelu in its tanh form (CUBLASLT_EPILOGUE_GELU is the tanh
  // approximation; the exact erf form would round differently). cuDNN's convolution
  // (conv/conv_cudnn.cpp): a bias, a residual and Relu. Float32, float16 and bfloat16
  // outputs.
  traits.takes_epilogue = [](const std::string &op_type, const ops::Epilogue &e, DType dtype) {
    if (dtype != DType::kFloat32 && dtype != DType::kFloat16 && dtype != DType::kBFloat16)
      return false;
    const bool relu = e.activation_op == "Relu";
    if (op_type == "MatMul" || op_type == "Gemm")
      return !e.has_activation() || relu || (e.activation_op == "Gelu" && e.approximate == "tanh");
    if (op_type == "Conv") return !e.has_activation() || relu;
    return false;
  };
  traits.unavailable_hint = "run on a machine with an NVIDIA GPU and driver, or use device='cpu'";
  return graph::make_device_provider(backend, std::move(traits));
}

}  // namespace xpuruntime::cuda
