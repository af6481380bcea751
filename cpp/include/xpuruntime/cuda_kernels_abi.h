// The one C ABI of the CUDA plugin's kernel families (flash_v2 attention, fused
// LayerNorm, column sums, strided copy, the testing kernels). No CUDA headers:
// the core, the bindings and the C++ KernelDefs call the kernels through
// plugin_lookup("cuda", name) with these argument structs, and the plugin's
// launchers read the same structs.
//
// Conventions shared by every family:
//   - one element-type code, KernelDType;
//   - every entry that can fail returns a KernelStatus and, when it is not kOk,
//     writes a NUL-terminated message into the caller's err buffer; exceptions
//     never cross the plugin boundary (throw_kernel_status turns the status back
//     into InvalidArgumentError / CudaError on the caller's side);
//   - tensors are raw device pointers with element strides; `stream` is a
//     cudaStream_t (nullptr = the legacy default stream).
#pragma once

#include <cstddef>
#include <cstdint>

#include "xpuruntime/error.h"

namespace xpuruntime::cuda_kernels {

// The element type of every family's operands.
enum class KernelDType : int32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// What every fallible entry returns.
// The codes name the typed error (DESIGN.md §10) the caller raises.
enum class KernelStatus : int32_t {
  kOk = 0,
  kInvalidArgument = 1,  // InvalidArgumentError
  kCudaFailure = 2,      // CudaError (and any other failure)
  kUnsupported = 3,      // UnsupportedOperationError
  kOutOfMemory = 4,      // OutOfMemoryError
};

// Raises the caller-side exception for a status an entry returned (no-op on kOk).
inline void throw_kernel_status(KernelStatus status, const char* err) {
  const char* msg = (err != nullptr && err[0] != '\0') ? err : "CUDA kernel failed (no message)";
  switch (status) {
    case KernelStatus::kOk: return;
    case KernelStatus::kInvalidArgument: throw InvalidArgumentError(msg);
    case KernelStatus::kUnsupported: throw UnsupportedOperationError(msg);
    case KernelStatus::kOutOfMemory: throw OutOfMemoryError(msg);
    case KernelStatus::kCudaFailure: break;
  }
  throw CudaError(msg);
}

// ---- flash_v2 attention (FlashAttention-2) --------------------------------------------
// Layout: q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D] with Hq % Hkv == 0 (grouped-query
// attention: query head h reads key/value head h / (Hq / Hkv)), o like q, lse
// [B, Hq, Sq] fp32 contiguous (natural-log logsumexp of the scaled scores). The last
// dimension of q/k/v/o/do is contiguous and 16-byte aligned. The causal mask is
// top-left aligned like torch's is_causal: key j is visible to query i iff j <= i.
// dtype: kFloat16 or kBFloat16; head_dim 64 or 128.
// Additive masks come in float32 or, in fp16/bf16 plans, in the 16-bit float types.
enum class FlashMaskKind : int32_t {
  kNone = 0,
  kBool = 1,
  kAdditiveF32 = 2,
  kAdditiveF16 = 3,
  kAdditiveBF16 = 4,
};

struct FlashMask {
  FlashMaskKind kind = FlashMaskKind::kNone;
  const void* ptr = nullptr;  // uint8 (bool) or float, broadcastable [B|1, H|1, Sq, Sk]
  int64_t stride_b = 0, stride_h = 0, stride_q = 0, stride_k = 0;  // elements; 0 = broadcast
};

struct FlashShape {
  int32_t batch = 0, heads_q = 0, heads_kv = 0, seqlen_q = 0, seqlen_k = 0, head_dim = 0;
};

struct FlashStrides {  // elements, for [B, H, S, D] (D contiguous)
  int64_t b = 0, h = 0, s = 0;
};

struct FlashFwdArgs {
  KernelDType dtype = KernelDType::kFloat16;
  FlashShape shape;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  FlashStrides q_stride, k_stride, v_stride, o_stride;
  float scale = 1.0f;
  bool causal = false;
  FlashMask mask;
  float dropout_p = 0.0f;
  const int64_t* rng_state = nullptr;  // device [seed, offset]; read by the kernel (graph-safe)
  void* stream = nullptr;
  // A row whose softmax is NaN (every key masked, or a NaN score) is written as zeros:
  // what the Where(IsNaN(P), 0, P) guard of torch's SDPA export computes. Off: such a
  // row is zeros when every key is masked and NaN when a score is NaN (torch's SDPA).
  bool nan_rows_zero = false;
};

// Workspace the caller allocates (fp32, contiguous):
//   dq_accum [B, Hq, Sq, D] and dsum [B, Hq, Sq]; the launcher zeroes dq_accum.
// dk/dv are [B, Hq, Sk, D] per query head: when Hq != Hkv the caller passes
// expanded buffers and sums each group of Hq / Hkv heads afterwards.
struct FlashBwdArgs {
  KernelDType dtype = KernelDType::kFloat16;
  FlashShape shape;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;
  const void* dout = nullptr;
  const float* lse = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  float* dq_accum = nullptr;
  float* dsum = nullptr;
  FlashStrides q_stride, k_stride, v_stride, o_stride, do_stride, dq_stride, dk_stride, dv_stride;
  float scale = 1.0f;
  bool causal = false;
  FlashMask mask;
  float dropout_p = 0.0f;
  const int64_t* rng_state = nullptr;
  void* stream = nullptr;
};

// ---- fused LayerNorm -------------------------------------------------------------------
// x, y, dy, dx are contiguous [rows, cols]; weight/bias/dweight/dbias are [cols] of
// x's dtype (or null); mean/rstd are fp32 [rows]. Statistics are computed in fp32.
struct LayerNormFwdArgs {
  KernelDType dtype = KernelDType::kFloat32;
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

// dweight/dbias are reduced in two stages through an fp32 workspace whose size the
// "layernorm_backward_workspace_bytes" entry reports.
struct LayerNormBwdArgs {
  KernelDType dtype = KernelDType::kFloat32;
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

// ---- column sums (a linear layer's bias gradient) ----------------------------------------
// Row-major [rows, cols] fp16/bf16 matrix (row stride ld >= cols) summed over rows
// into out [cols] with fp32 accumulation; deterministic.
struct ColumnSumsArgs {
  KernelDType dtype = KernelDType::kBFloat16;
  int64_t rows = 0, cols = 0;
  int64_t ld = 0;
  const void* x = nullptr;
  void* out = nullptr;
  float* workspace = nullptr;
  int64_t workspace_bytes = 0;
  void* stream = nullptr;
};

// ---- entry points: the names plugin_lookup("cuda", name) resolves, and their types --------
template <typename Args>
using LaunchEntry = KernelStatus (*)(const Args* args, char* err, std::size_t err_len);

namespace entry {
inline constexpr const char* kFlashForward = "flash_attention_forward";    // LaunchEntry<FlashFwdArgs>
inline constexpr const char* kFlashBackward = "flash_attention_backward";  // LaunchEntry<FlashBwdArgs>
inline constexpr const char* kLayerNormForward = "layernorm_forward";      // LaunchEntry<LayerNormFwdArgs>
inline constexpr const char* kLayerNormBackward = "layernorm_backward";    // LaunchEntry<LayerNormBwdArgs>
inline constexpr const char* kLayerNormBackwardWorkspace = "layernorm_backward_workspace_bytes";
inline constexpr const char* kLayerNormSetConfig = "layernorm_set_config";
inline constexpr const char* kLayerNormDescribeConfig = "layernorm_describe_config";
inline constexpr const char* kColumnSums = "column_sums";  // LaunchEntry<ColumnSumsArgs>
inline constexpr const char* kColumnSumsWorkspace = "column_sums_workspace_bytes";
inline constexpr const char* kStridedCopy = "strided_copy";
inline constexpr const char* kTestSpin = "test_spin";
inline constexpr const char* kTestAxpy = "test_axpy";
inline constexpr const char* kTestErrorName = "test_error_name";
}  // namespace entry

// Bytes of fp32 workspace layernorm_backward needs for these arguments on the current
// device (pointers may still be null; null counts as aligned).
using LayerNormWorkspaceEntry = KernelStatus (*)(const LayerNormBwdArgs* args, int64_t* bytes, char* err,
                                                 std::size_t err_len);
// Launch-configuration override for sweeps ("" clears it; syntax
// "tpr=..,grid=..,hint=..,prefetch=.."): affects every later launch in the process.
using LayerNormSetConfigEntry = KernelStatus (*)(const char* spec, char* err, std::size_t err_len);
// The forward configuration a launch of this shape would use now, written to out.
using LayerNormDescribeConfigEntry = KernelStatus (*)(KernelDType dtype, int64_t rows, int64_t cols,
                                                      char* out, std::size_t out_len);
// Bytes of fp32 workspace column_sums needs for a [rows, cols] matrix.
using ColumnSumsWorkspaceEntry = KernelStatus (*)(int64_t rows, int64_t cols, int64_t* bytes, char* err,
                                                  std::size_t err_len);
// dst <- src for a tensor of `ndim` dims on one CUDA device, any element strides
// (elements of elem_size bytes: 1, 2, 4 or 8), asynchronous on `stream`.
using StridedCopyEntry = KernelStatus (*)(void* dst, const void* src, int32_t ndim, const int64_t* shape,
                                          const int64_t* dst_strides, const int64_t* src_strides,
                                          int32_t elem_size, void* stream, char* err, std::size_t err_len);
// Testing kernels (tests only): return a cudaError_t value (0 = success).
using TestSpinEntry = int32_t (*)(double ms, void* stream);  // occupies `stream` for ms
using TestAxpyEntry = int32_t (*)(float a, const float* x, float* y, int64_t n,
                                  void* stream);          // y = fma(a, x, y)
using TestErrorNameEntry = const char* (*)(int32_t err);  // "cudaErrorInvalidValue"

}  // namespace xpuruntime::cuda_kernels
