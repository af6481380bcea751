// IsNaN and IsInf: a float input of any width, a bool output. Classification
// needs no arithmetic, so the 16-bit floats are tested in fp32 (exact: widening
// keeps NaN a NaN and an infinity that infinity).
#include <cmath>

#include "backends/cuda/kernels/common/device_types.cuh"
#include "backends/cuda/kernels/elementwise/elementwise_impl.h"

namespace xpuruntime::cuda_ops {
namespace {

template <typename T>
__global__ void classify_kernel(const T* __restrict__ x, bool* __restrict__ y, int64_t n, bool nan,
                                bool pos, bool neg) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const auto v = load(x[i]);
    y[i] = nan ? isnan(v) : (isinf(v) && (v > 0 ? pos : neg));
  }
}

}  // namespace

void launch_classify(ClassifyOp op, DType t, const void* x, void* y, int64_t n,
                     bool detect_positive, bool detect_negative, void* stream) {
  if (n <= 0) return;
  const bool nan = op == ClassifyOp::kIsNaN;
  visit_dtype<TypeSet::kFloat>(t, nan ? "IsNaN" : "IsInf", [&](auto tag) {
    using T = typename decltype(tag)::type;
    classify_kernel<T><<<grid_for(n, 256), 256, 0, as_stream(stream)>>>(
        static_cast<const T*>(x), static_cast<bool*>(y), n, nan, detect_positive, detect_negative);
    XRT_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace xpuruntime::cuda_ops
