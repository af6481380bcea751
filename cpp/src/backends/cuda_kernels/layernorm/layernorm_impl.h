// Plain-argument interface of the fused LayerNorm kernels (no CUDA headers): the
// binding and the plugin's launchers share it. x, y, dy, dx are contiguous
// [rows, cols]; weight/bias/dweight/dbias are [cols] of the same dtype as x (or
// null); mean/rstd are fp32 [rows] (optional in the forward pass). Statistics are
// always computed in fp32.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xpuruntime::cuda_kernels {

enum class LnDType : int32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

struct LayerNormFwdArgs {
  LnDType dtype = LnDType::kFloat32;
  int64_t rows = 0, cols = 0;
  const void* x = nullptr;
  const void* weight = nullptr;  // optional
  const void* bias = nullptr;    // optional
  void* y = nullptr;
  float* mean = nullptr;  // both or neither: without them (inference) they are not written
  float* rstd = nullptr;
  float eps = 1e-5f;
  int32_t threads_per_row = 0;  // 0: chosen by the launcher (benchmarks may force one)
  void* stream = nullptr;
};

// dweight/dbias are reduced in two stages: every row group writes fp32 partial
// sums to `workspace` ([2, parts, cols]), then a column kernel sums the parts.
// layernorm_backward_workspace_bytes() says how large the workspace must be.
struct LayerNormBwdArgs {
  LnDType dtype = LnDType::kFloat32;
  int64_t rows = 0, cols = 0;
  const void* dy = nullptr;
  const void* x = nullptr;
  const float* mean = nullptr;
  const float* rstd = nullptr;
  const void* weight = nullptr;  // optional (treated as ones)
  void* dx = nullptr;
  void* dweight = nullptr;  // optional
  void* dbias = nullptr;    // optional
  float* workspace = nullptr;
  int64_t workspace_bytes = 0;
  int32_t threads_per_row = 0;
  void* stream = nullptr;
};

void layernorm_forward(const LayerNormFwdArgs& args);
void layernorm_backward(const LayerNormBwdArgs& args);
// Bytes of fp32 workspace layernorm_backward needs for these arguments on the
// current device (pointers may still be null; null counts as aligned).
int64_t layernorm_backward_workspace_bytes(const LayerNormBwdArgs& args);

}  // namespace xpuruntime::cuda_kernels

// Exported from libxpuruntime_cuda.so (see flash_v2_impl.h for the conventions).
extern "C" {
int xrt_layernorm_forward(const xpuruntime::cuda_kernels::LayerNormFwdArgs* args, char* err,
                          size_t err_len);
int xrt_layernorm_backward(const xpuruntime::cuda_kernels::LayerNormBwdArgs* args, char* err,
                           size_t err_len);
int xrt_layernorm_backward_workspace_bytes(const xpuruntime::cuda_kernels::LayerNormBwdArgs* args,
                                           int64_t* bytes, char* err, size_t err_len);
// Launch-configuration override for sweeps (syntax in layernorm_config.h; "" clears
// it): affects every later launch in the process. 0 on success, 1 on a bad spec.
int xrt_layernorm_set_config(const char* spec, char* err, size_t err_len);
// The forward configuration a launch of this shape would use now (dtype as
// LnDType), written to out as "tpr=..,grid=..,hint=..,prefetch=..".
int xrt_layernorm_describe_config(int32_t dtype, int64_t rows, int64_t cols, char* out,
                                  size_t out_len);
}
