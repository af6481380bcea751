// Plain-argument interface of the FlashAttention-2 kernels (no CUDA headers), so
// the pybind11 binding (which never links CUDA) and the plugin's launchers share
// one definition. Tensors are raw device pointers with element strides; the last
// dimension of q/k/v/o/do is contiguous and 16-byte aligned (the Python layer
// checks this and copies when it does not hold).
//
// Layout: q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D] with Hq % Hkv == 0 (grouped-query
// attention: query head h reads key/value head h / (Hq / Hkv)), o like q,
// lse [B, Hq, Sq] fp32 contiguous (natural-log logsumexp of the scaled scores).
// The causal mask is top-left aligned like torch's is_causal: key j is visible to
// query i iff j <= i.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xpuruntime::cuda_kernels {

enum class FlashDType : int32_t { kFloat16 = 0, kBFloat16 = 1 };
enum class FlashMaskKind : int32_t { kNone = 0, kBool = 1, kAdditiveF32 = 2 };

struct FlashMask {
  FlashMaskKind kind = FlashMaskKind::kNone;
  const void* ptr = nullptr;  // uint8 (bool) or float32, broadcastable [B|1, H|1, Sq, Sk]
  int64_t stride_b = 0, stride_h = 0, stride_q = 0, stride_k = 0;  // elements; 0 = broadcast
};

struct FlashShape {
  int32_t batch = 0, heads_q = 0, heads_kv = 0, seqlen_q = 0, seqlen_k = 0, head_dim = 0;
};

struct FlashStrides {  // elements, for [B, H, S, D] (D contiguous)
  int64_t b = 0, h = 0, s = 0;
};

struct FlashFwdArgs {
  FlashDType dtype = FlashDType::kFloat16;
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
  void* stream = nullptr;              // cudaStream_t
};

// Workspace the caller allocates (fp32, contiguous):
//   dq_accum [B, Hq, Sq, D] and dsum [B, Hq, Sq]; the launcher zeroes dq_accum.
// dk/dv are [B, Hq, Sk, D] per query head: when Hq != Hkv the caller passes
// expanded buffers and sums each group of Hq / Hkv heads afterwards.
struct FlashBwdArgs {
  FlashDType dtype = FlashDType::kFloat16;
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

// Head dimensions with compiled kernels; others are rejected with a reason.
constexpr bool flash_supports_head_dim(int d) { return d == 64 || d == 128; }

// Launchers (flash_fwd_*.cu / flash_bwd_*.cu). Throw InvalidArgumentError for a bad
// case and CudaError when a launch fails.
void flash_attention_forward(const FlashFwdArgs& args);
void flash_attention_backward(const FlashBwdArgs& args);

}  // namespace xpuruntime::cuda_kernels

// Exported from libxpuruntime_cuda.so for the binding (looked up with
// plugin_symbol): return 0 on success, else write a message to err and return
// 1 for an invalid argument or 2 for a CUDA failure.
extern "C" {
int xrt_flash_attention_forward(const xpuruntime::cuda_kernels::FlashFwdArgs* args, char* err,
                                size_t err_len);
int xrt_flash_attention_backward(const xpuruntime::cuda_kernels::FlashBwdArgs* args, char* err,
                                 size_t err_len);
}
