// RotaryHalf: the rotary position embedding of GPT-NeoX / Llama / Qwen exports
// in one pass over x (the exported form is two Slices, a Neg, a Concat, two
// Muls and an Add: five to six passes over the query or key tensor). The
// rotated partner of element j of a row is j + d/2 (negated) or j - d/2; cos
// and sin are read through their broadcast strides (one [S, d] table shared by
// every batch and head).
#include "backends/cuda/kernels/common/device_types.cuh"
#include "backends/cuda/kernels/rotary/rotary_impl.h"

namespace xpuruntime::cuda_ops {
namespace {

template <typename T>
__global__ void rotary_half_kernel(const T *__restrict__ x, const T *__restrict__ cs,
                                   const T *__restrict__ sn, T *__restrict__ y, StridedIndex ix,
                                   int64_t d) {
  const int64_t half = d / 2;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < ix.numel;
       i += step) {
    const int64_t j = i % d;
    const float rot =
        j < half ? -static_cast<float>(load(x[i + half])) : static_cast<float>(load(x[i - half]));
    const float v =
        static_cast<float>(load(x[i])) * static_cast<float>(load(cs[strided_offset(ix, 1, i)])) +
        rot * static_cast<float>(load(sn[strided_offset(ix, 2, i)]));
    y[i] = store<T>(v);
  }
}

}  // namespace

void launch_rotary_half(DType t, const StridedIndex &ix, int64_t d, const void *x, const void *cos,
                        const void *sin, void *y, void *stream) {
  if (ix.numel <= 0 || d <= 0) return;
  visit_dtype<TypeSet::kFloat>(t, "RotaryHalf", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rotary_half_kernel<T><<<grid_for(ix.numel, 256), 256, 0, as_stream(stream)>>>(
        static_cast<const T *>(x), static_cast<const T *>(cos), static_cast<const T *>(sin),
        static_cast<T *>(y), ix, d);
    XRT_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace xpuruntime::cuda_ops
