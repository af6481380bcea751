// Entry points of the attention kernels: argument validation, dispatch on dtype
// and head dimension, and the C-ABI entries plugin_lookup("cuda", ...) returns
// (exceptions never cross the plugin boundary: they become KernelStatus codes).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "backends/cuda/kernel_entry.h"
#include "backends/cuda/kernels/flash_v2/flash_v2_impl.h"
#include "xpuruntime/error.h"

namespace xpuruntime::cuda_kernels {
namespace flash {
template <typename T, int kD>
void run_flash_fwd(const FlashFwdArgs& a);  // flash_fwd_hdim*.cu
template <typename T, int kD>
void run_flash_bwd(const FlashBwdArgs& a);  // flash_bwd_hdim*.cu
}  // namespace flash

namespace {

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

void check_tensor(const char* name, const void* ptr, const FlashStrides& s) {
  XRT_CHECK(ptr != nullptr, InvalidArgumentError, "flash attention: ", name, " is null");
  XRT_CHECK(aligned16(ptr), InvalidArgumentError, "flash attention: ", name,
            " must be 16-byte aligned (pass a contiguous tensor)");
  XRT_CHECK(s.b % 8 == 0 && s.h % 8 == 0 && s.s % 8 == 0, InvalidArgumentError,
            "flash attention: the strides of ", name,
            " must be multiples of 8 elements (16 bytes) with a contiguous last dimension");
}

void check_common(KernelDType dtype, const FlashShape& sh, const FlashMask& mask, float dropout_p,
                  const int64_t* rng_state, bool backward) {
  XRT_CHECK(dtype == KernelDType::kFloat16 || dtype == KernelDType::kBFloat16, InvalidArgumentError,
            "flash attention: dtype must be float16 or bfloat16");
  XRT_CHECK(flash_supports_head_dim(sh.head_dim, backward), InvalidArgumentError, "flash attention",
            backward ? " backward" : "", ": head_dim ", sh.head_dim,
            " has no kernel (supported: ", backward ? "64, 128)" : "32, 64, 128)");
  XRT_CHECK(sh.batch > 0 && sh.heads_q > 0 && sh.heads_kv > 0 && sh.seqlen_q > 0 && sh.seqlen_k > 0,
            InvalidArgumentError, "flash attention: batch, heads and sequence lengths must be > 0");
  XRT_CHECK(sh.heads_q % sh.heads_kv == 0, InvalidArgumentError, "flash attention: heads_q (",
            sh.heads_q, ") must be a multiple of heads_kv (", sh.heads_kv, ")");
  XRT_CHECK(sh.batch <= 65535 && sh.heads_q <= 65535, InvalidArgumentError,
            "flash attention: batch and heads must be <= 65535");
  XRT_CHECK(mask.kind == FlashMaskKind::kNone || mask.ptr != nullptr, InvalidArgumentError,
            "flash attention: mask kind set but mask pointer is null");
  XRT_CHECK(dropout_p >= 0.0f && dropout_p < 1.0f, InvalidArgumentError,
            "flash attention: dropout_p must be in [0, 1), got ", dropout_p);
  XRT_CHECK(dropout_p == 0.0f || rng_state != nullptr, InvalidArgumentError,
            "flash attention: dropout needs the device rng_state [seed, offset]");
}

template <typename Args, typename Fn16, typename Fn32>
void dispatch(const Args& a, Fn16 half_fn, Fn32 bf16_fn) {
  if (a.dtype == KernelDType::kFloat16) {
    half_fn();
  } else {
    bf16_fn();
  }
}

}  // namespace

void flash_attention_forward(const FlashFwdArgs& a) {
  check_common(a.dtype, a.shape, a.mask, a.dropout_p, a.rng_state, /*backward=*/false);
  check_tensor("q", a.q, a.q_stride);
  check_tensor("k", a.k, a.k_stride);
  check_tensor("v", a.v, a.v_stride);
  check_tensor("out", a.o, a.o_stride);
  XRT_CHECK(a.lse != nullptr, InvalidArgumentError, "flash attention: lse is null");
  auto run = [&](auto tag) {
    using T = decltype(tag);
    switch (a.shape.head_dim) {
      case 32:
        return flash::run_flash_fwd<T, 32>(a);
      case 64:
        return flash::run_flash_fwd<T, 64>(a);
      default:
        return flash::run_flash_fwd<T, 128>(a);
    }
  };
  dispatch(
      a, [&] { run(__half{}); }, [&] { run(__nv_bfloat16{}); });
}

void flash_attention_backward(const FlashBwdArgs& a) {
  check_common(a.dtype, a.shape, a.mask, a.dropout_p, a.rng_state, /*backward=*/true);
  check_tensor("q", a.q, a.q_stride);
  check_tensor("k", a.k, a.k_stride);
  check_tensor("v", a.v, a.v_stride);
  check_tensor("out", a.o, a.o_stride);
  check_tensor("grad_out", a.dout, a.do_stride);
  check_tensor("dq", a.dq, a.dq_stride);
  check_tensor("dk", a.dk, a.dk_stride);
  check_tensor("dv", a.dv, a.dv_stride);
  XRT_CHECK(a.lse != nullptr && a.dq_accum != nullptr && a.dsum != nullptr, InvalidArgumentError,
            "flash attention backward: lse, dq_accum and dsum must be given");
  XRT_CHECK(aligned16(a.dq_accum), InvalidArgumentError,
            "flash attention backward: dq_accum must be 16-byte aligned");
  const bool d64 = a.shape.head_dim == 64;
  dispatch(
      a,
      [&] { d64 ? flash::run_flash_bwd<__half, 64>(a) : flash::run_flash_bwd<__half, 128>(a); },
      [&] {
        d64 ? flash::run_flash_bwd<__nv_bfloat16, 64>(a) : flash::run_flash_bwd<__nv_bfloat16, 128>(a);
      });
}

KernelStatus flash_attention_forward_entry(const FlashFwdArgs* args, char* err,
                                           std::size_t err_len) noexcept {
  return guarded([&] { flash_attention_forward(*args); }, err, err_len);
}

KernelStatus flash_attention_backward_entry(const FlashBwdArgs* args, char* err,
                                            std::size_t err_len) noexcept {
  return guarded([&] { flash_attention_backward(*args); }, err, err_len);
}

}  // namespace xpuruntime::cuda_kernels
