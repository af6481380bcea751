// Host launchers of the attention kernels, templated on dtype and head dimension;
// each flash_{fwd,bwd}_hdim*.cu instantiates them for one head dimension so the
// heavy kernels compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <cstdint>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/flash_v2/flash_bwd_kernel.cuh"
#include "backends/cuda/kernels/flash_v2/flash_fwd_kernel.cuh"

namespace xpuruntime::cuda_kernels::flash {

// Raises a kernel's dynamic shared-memory limit once per device (bit per device
// index): the attribute is per device context, and setting it on every launch
// would cost a driver call in the hot path.
template <typename Kernel>
void ensure_smem_limit(Kernel kernel, int bytes, std::atomic<uint64_t>& done_devices) {
  if (bytes <= 48 * 1024) return;
  int device = 0;
  XRT_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? (uint64_t{1} << device) : 0;
  if (bit != 0 && (done_devices.load(std::memory_order_acquire) & bit)) return;
  XRT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done_devices.fetch_or(bit, std::memory_order_acq_rel);
}

// Tile shapes per head dimension: 128 query rows per CTA (4 warps x 32 rows);
// D=128 streams 64 keys per step, D=64 and D=32 stream XRT_FLASH_FWD_D64_BLOCK_N.
#ifndef XRT_FLASH_FWD_D64_BLOCK_N
#define XRT_FLASH_FWD_D64_BLOCK_N 64  // measured on an H200: 4-9% faster than 128 (fewer registers, no spills)
#endif
template <typename T, int kD, bool kExtras, int kBlockM = 128>
using FwdCfgFor = FwdConfig<T, kD, kBlockM, (kD == 128 ? 64 : XRT_FLASH_FWD_D64_BLOCK_N), 4, kExtras>;

// Streaming multiprocessors of the current device, asked once per device.
inline int current_device_sms() {
  static std::atomic<int> cache[64] = {};
  int device = 0;
  XRT_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 64) {
    const int known = cache[device].load(std::memory_order_relaxed);
    if (known != 0) return known;
  }
  int sms = 0;
  XRT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (device < 64) cache[device].store(sms, std::memory_order_relaxed);
  return sms;
}

// Whether 128-row CTAs would leave the GPU under-filled (fewer than two per SM: short
// sequences at serving batch sizes, e.g. 8 x 12 heads x 128 tokens = 96 CTAs on 132
// SMs); then 64-row CTAs (one 16-row MMA tile per warp) double the parallelism.
inline bool small_fwd_grid(const FlashFwdArgs& a) {
  const int64_t ctas = cdiv(a.shape.seqlen_q, 128) * int64_t{a.shape.heads_q} * a.shape.batch;
  return ctas < 2 * int64_t{current_device_sms()};
}

template <typename Cfg>
void launch_fwd(const FlashFwdArgs& a) {
  static std::atomic<uint64_t> smem_done{0};
  auto kernel = flash_fwd_kernel<Cfg>;
  ensure_smem_limit(kernel, Cfg::kSmemBytes, smem_done);
  const dim3 grid(cdiv(a.shape.seqlen_q, Cfg::kBlockM), a.shape.heads_q, a.shape.batch);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, static_cast<cudaStream_t>(a.stream)>>>(a);
  XRT_CUDA_CHECK(cudaGetLastError());
}

#if XRT_FLASH_SM90
namespace sm90 {
template <typename T, int kD>
void run_flash_fwd_sm90(const FlashFwdArgs& a);  // sm90/flash_fwd_sm90_hdim*.cu (sm_90a)
template <typename T, int kD>
void run_flash_bwd_sm90(const FlashBwdArgs& a);  // sm90/flash_bwd_sm90_hdim*.cu (sm_90a)
}  // namespace sm90

// Whether the current device is compute capability 9.0 (the only one the sm_90a
// code runs on). Asked once per device and cached (0 unknown, 1 yes, 2 no): the
// hot path then costs one cudaGetDevice, which the runtime answers locally.
inline bool current_device_is_sm90() {
  static std::atomic<int8_t> cache[64] = {};
  int device = 0;
  XRT_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 64) {
    const int8_t known = cache[device].load(std::memory_order_relaxed);
    if (known != 0) return known == 1;
  }
  int major = 0, minor = 0;
  XRT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  XRT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  // XRT_FLASH_PORTABLE=1 runs the portable mma.sync kernels on sm_90 too: compute-
  // sanitizer's racecheck cannot run wgmma/TMA kernels (it stops with an internal
  // error, as it does in cuBLASLt's Hopper kernels), so the shared-memory logic is
  // race-checked on the portable kernels, and the sm_90a ones by memcheck and synccheck.
  const char* portable = std::getenv("XRT_FLASH_PORTABLE");
  const bool yes = major == 9 && minor == 0 && !(portable != nullptr && portable[0] == '1');
  if (device < 64) cache[device].store(yes ? 1 : 2, std::memory_order_relaxed);
  return yes;
}
#endif

template <typename T, int kD>
void run_flash_fwd(const FlashFwdArgs& a) {
  const bool extras = a.mask.kind != FlashMaskKind::kNone || a.dropout_p > 0.0f;
#if XRT_FLASH_SM90
  // Hopper: the wgmma kernel covers the plain case (its softmax keeps maxima in
  // the raw score domain, which needs scale > 0; anything else stays here). It has
  // no D = 32 tiles: that head dim (PVT, Swin) runs the portable kernel everywhere.
  if constexpr (kD >= 64) {
    if (!extras && a.scale > 0.0f && current_device_is_sm90()) {
      sm90::run_flash_fwd_sm90<T, kD>(a);
      return;
    }
  }
#endif
  const bool small = small_fwd_grid(a);
  if (extras) {
    small ? launch_fwd<FwdCfgFor<T, kD, true, 64>>(a) : launch_fwd<FwdCfgFor<T, kD, true>>(a);
  } else {
    small ? launch_fwd<FwdCfgFor<T, kD, false, 64>>(a) : launch_fwd<FwdCfgFor<T, kD, false>>(a);
  }
}

template <typename Cfg>
void launch_bwd_main(const FlashBwdArgs& a) {
  static std::atomic<uint64_t> smem_done{0};
  auto kernel = flash_bwd_kernel<Cfg>;
  ensure_smem_limit(kernel, Cfg::kSmemBytes, smem_done);
  const dim3 grid(cdiv(a.shape.seqlen_k, Cfg::kBlockN), a.shape.heads_q, a.shape.batch);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, static_cast<cudaStream_t>(a.stream)>>>(a);
  XRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T, int kD>
void run_flash_bwd(const FlashBwdArgs& a) {
  const auto stream = static_cast<cudaStream_t>(a.stream);
  const int64_t rows = static_cast<int64_t>(a.shape.batch) * a.shape.heads_q * a.shape.seqlen_q;
  if (rows > 0) {
    XRT_CUDA_CHECK(cudaMemsetAsync(a.dq_accum, 0, rows * kD * sizeof(float), stream));
    constexpr int kWarps = 8, kRowsPerBlock = kWarps * 32 / (kD / 8);  // kD/8 lanes per row
    const auto blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
    flash_bwd_dot_do_o<T, kD><<<blocks, kWarps * 32, 0, stream>>>(a);
    XRT_CUDA_CHECK(cudaGetLastError());
  }
  const bool extras = a.mask.kind != FlashMaskKind::kNone || a.dropout_p > 0.0f;
#if XRT_FLASH_SM90
  // Hopper: the wgmma kernel covers the plain case and converts dQ itself (its
  // dq_accum layout is its own). The zeroing and D above stay here, so their
  // kernels are instantiated in one translation unit only.
  if (!extras && current_device_is_sm90()) {
    sm90::run_flash_bwd_sm90<T, kD>(a);
    return;
  }
#endif
  if (extras) {
    launch_bwd_main<BwdConfig<T, kD, true>>(a);
  } else {
    launch_bwd_main<BwdConfig<T, kD, false>>(a);
  }
  if (rows > 0) {
    const int64_t chunks = rows * (kD / 8);
    constexpr int kThreads = 256;
    const auto blocks = static_cast<unsigned>((chunks + kThreads - 1) / kThreads);
    flash_bwd_convert_dq<T, kD><<<blocks, kThreads, 0, stream>>>(a);
    XRT_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace xpuruntime::cuda_kernels::flash
