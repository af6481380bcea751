// The unfused Conv epilogue (see conv_epilogue_impl.h): one thread per element
// of the [N, K, inner] output, the arithmetic in float.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/conv/conv_epilogue_impl.h"

namespace xpuruntime::cudnn_conv {
namespace {

__device__ inline float load(const float* p, int64_t i) { return p[i]; }
__device__ inline float load(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ inline float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ inline void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ inline void store(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }
__device__ inline void store(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

template <typename T>
__global__ void bias_relu_kernel(T* y, const T* bias, int64_t channels, int64_t inner, int64_t n,
                                 bool relu) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = load(y, i);
    if (bias != nullptr) v += load(bias, (i / inner) % channels);
    if (relu) v = v < 0.f ? 0.f : v;  // NaN stays NaN, as in ONNX and the CPU epilogue
    store(y, i, v);
  }
}

template <typename T>
void launch(void* y, const void* bias, int64_t channels, int64_t inner, int64_t n, bool relu,
            void* stream) {
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 65535 * 8);
  bias_relu_kernel<T>
      <<<static_cast<unsigned>(blocks), threads, 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<T*>(y), static_cast<const T*>(bias), channels, inner, n, relu);
  XRT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_bias_relu(DType t, void* y, const void* bias, int64_t batch, int64_t channels,
                      int64_t inner, bool relu, void* stream) {
  const int64_t n = batch * channels * inner;
  if (n == 0) return;
  switch (t) {
    case DType::kFloat32:
      return launch<float>(y, bias, channels, inner, n, relu, stream);
    case DType::kFloat16:
      return launch<__half>(y, bias, channels, inner, n, relu, stream);
    case DType::kBFloat16:
      return launch<__nv_bfloat16>(y, bias, channels, inner, n, relu, stream);
    default:
      XRT_THROW(InvalidArgumentError, "cudnn conv epilogue: dtype ", dtype_name(t),
                " is not float32, float16 or bfloat16");
  }
}

}  // namespace xpuruntime::cudnn_conv
