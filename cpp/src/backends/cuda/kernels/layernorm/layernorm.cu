// Launchers of the fused LayerNorm kernels: pick the register-resident variant
// (threads per row, vectors per thread) and the forward launch configuration
// (grid, cache hints, prefetch) for the shape, and define the C-ABI entry points
// the plugin's lookup hands out. The configuration can be overridden at run time
// (XRT_LN_CONFIG, or the layernorm_set_config entry from a sweep); see
// layernorm_config.h.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <type_traits>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernel_entry.h"
#include "backends/cuda/kernels/layernorm/layernorm_config.h"
#include "backends/cuda/kernels/layernorm/layernorm_impl.h"
#include "backends/cuda/kernels/layernorm/layernorm_kernel.cuh"
#include "xpuruntime/error.h"

namespace xpuruntime::cuda_kernels {
namespace {

// The default configurations (forward and backward) are chosen in
// layernorm_config.cpp; this file turns a configuration into a launch.
int element_bytes(KernelDType t) { return t == KernelDType::kFloat32 ? 4 : 2; }

struct Plan {
  bool vectorized = false;
  int tpr = 0;  // threads per row
  int vpt = 0;  // 16-byte vectors per thread
};

bool aligned16(const void* p) { return p == nullptr || (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The row in 16-byte vectors over tpr threads (a power of two in 32..1024, from
// the configuration). Vectors per thread select a compiled variant (1..4); rows
// needing more take the scalar kernels, as do rows that are not whole vectors and
// unaligned pointers.
Plan make_plan(KernelDType dtype, int64_t cols, int32_t tpr, bool pointers_aligned) {
  Plan plan;
  const int vec = 16 / element_bytes(dtype);
  if (cols % vec != 0 || !pointers_aligned || tpr <= 0) return plan;
  const int64_t need = (cols / vec + tpr - 1) / tpr;
  if (need > 4) return plan;  // the largest compiled variant
  plan.vectorized = true;
  plan.tpr = tpr;
  plan.vpt = static_cast<int>(need);
  return plan;
}

int current_device() {
  int device = 0;
  XRT_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

// Multiprocessor count of the current device, cached: the launch path must stay
// cheap for small problems (and free of extra driver calls under graph capture).
int sm_count() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices] = {};
  const int device = current_device();
  if (device < kMaxDevices) {
    if (const int v = cache[device].load(std::memory_order_relaxed); v > 0) return v;
  }
  int sms = 0;
  XRT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (device < kMaxDevices) cache[device].store(sms, std::memory_order_relaxed);
  return sms;
}

// Resident CTAs per multiprocessor of one kernel, cached per device.
template <typename Kernel>
int occupancy(Kernel kernel, int threads, std::atomic<int> (&cache)[64]) {
  const int device = current_device();
  if (device < 64) {
    if (const int v = cache[device].load(std::memory_order_relaxed); v > 0) return v;
  }
  int per_sm = 0;
  XRT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  per_sm = std::max(per_sm, 1);
  if (device < 64) cache[device].store(per_sm, std::memory_order_relaxed);
  return per_sm;
}

// Row groups of the backward pass (also the number of dweight/dbias partial sums):
// as many as fit on the device at once (occupancy), never more than there are rows.
template <typename T, int kTPR, int kVPT>
struct BwdOccupancy {
  static void run(int* per_sm) {
    static std::atomic<int> occ_cache[64] = {};
    *per_sm = occupancy(ln::ln_bwd_kernel<T, kTPR, kVPT>, ln::RowGroups<kTPR>::kThreads, occ_cache);
  }
};

// Occupancy is looked up per compiled kernel (cached); a persistent grid is SMs x
// resident CTAs, a tile grid one CTA per kRowsPerCta rows.
template <typename T, int kTPR, int kVPT, bool kPrefetch>
void launch_fwd_kernel(const LayerNormFwdArgs& a, const ln::FwdConfig& c, cudaStream_t stream) {
  using G = ln::RowGroups<kTPR>;
  auto kernel = ln::ln_fwd_kernel<T, kTPR, kVPT, kPrefetch>;
  const int64_t groups = (a.rows + G::kRowsPerCta - 1) / G::kRowsPerCta;
  int64_t grid = groups;
  if (c.grid != ln::LnGrid::kTile) {
    static std::atomic<int> occ_cache[64] = {};
    const int per_sm = occupancy(kernel, G::kThreads, occ_cache);
    grid = std::min<int64_t>(groups, static_cast<int64_t>(sm_count()) * per_sm);
  }
  grid = std::max<int64_t>(1, std::min<int64_t>(grid, 0x7fffffff));
  kernel<<<static_cast<unsigned>(grid), G::kThreads, 0, stream>>>(a, c.hint);
  XRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T, int kTPR, int kVPT>
void launch_bwd_vec(const LayerNormBwdArgs& a, int64_t parts, cudaStream_t stream) {
  using G = ln::RowGroups<kTPR>;
  const int64_t grid = (parts + G::kRowsPerCta - 1) / G::kRowsPerCta;
  ln::ln_bwd_kernel<T, kTPR, kVPT><<<static_cast<unsigned>(grid), G::kThreads, 0, stream>>>(a, parts);
  XRT_CUDA_CHECK(cudaGetLastError());
}

// Expands the run-time (tpr, vpt) choice into the compiled variants.
template <typename T, template <typename, int, int> class Launch, typename... Args>
void by_plan(const Plan& p, Args&&... args) {
  auto vpt = [&](auto tpr_c) {
    constexpr int kTPR = decltype(tpr_c)::value;
    switch (p.vpt) {
      case 1: Launch<T, kTPR, 1>::run(args...); break;
      case 2: Launch<T, kTPR, 2>::run(args...); break;
      case 3: Launch<T, kTPR, 3>::run(args...); break;
      default: Launch<T, kTPR, 4>::run(args...); break;
    }
  };
  switch (p.tpr) {
    case 32: vpt(std::integral_constant<int, 32>{}); break;
    case 64: vpt(std::integral_constant<int, 64>{}); break;
    case 128: vpt(std::integral_constant<int, 128>{}); break;
    case 256: vpt(std::integral_constant<int, 256>{}); break;
    case 512: vpt(std::integral_constant<int, 512>{}); break;
    case 1024: vpt(std::integral_constant<int, 1024>{}); break;
    default: XRT_THROW(InvalidArgumentError, "layernorm: threads_per_row must be a power of two in [32, 1024], got ", p.tpr);
  }
}

template <typename T, int kTPR, int kVPT>
struct FwdLaunch {
  static void run(const LayerNormFwdArgs& a, const ln::FwdConfig& c, cudaStream_t s) {
    if (c.prefetch != 0) {
      launch_fwd_kernel<T, kTPR, kVPT, true>(a, c, s);
    } else {
      launch_fwd_kernel<T, kTPR, kVPT, false>(a, c, s);
    }
  }
};
template <typename T, int kTPR, int kVPT>
struct BwdLaunch {
  static void run(const LayerNormBwdArgs& a, int64_t parts, cudaStream_t s) {
    launch_bwd_vec<T, kTPR, kVPT>(a, parts, s);
  }
};

template <typename T>
int64_t bwd_parts(const Plan& plan, int64_t rows) {
  int per_sm = 0;
  by_plan<T, BwdOccupancy>(plan, &per_sm);
  const int64_t groups = static_cast<int64_t>(sm_count()) * std::max(per_sm, 1) * (ln::kMinThreads / std::min(plan.tpr, ln::kMinThreads));
  return std::max<int64_t>(1, std::min<int64_t>(rows, groups));
}

int64_t scalar_grid(int64_t rows) { return std::max<int64_t>(1, std::min<int64_t>(rows, sm_count() * 8LL)); }

template <typename T>
void forward_typed(const LayerNormFwdArgs& a) {
  const auto stream = static_cast<cudaStream_t>(a.stream);
  const ln::FwdConfig cfg = ln::resolve_fwd_config(a.dtype, a.rows, a.cols, a.threads_per_row);
  const Plan plan = make_plan(a.dtype, a.cols, cfg.tpr,
                              aligned16(a.x) && aligned16(a.y) && aligned16(a.weight) && aligned16(a.bias));
  if (plan.vectorized) {
    by_plan<T, FwdLaunch>(plan, a, cfg, stream);
  } else {
    ln::ln_fwd_scalar_kernel<T><<<static_cast<unsigned>(scalar_grid(a.rows)), ln::kScalarThreads, 0, stream>>>(a);
    XRT_CUDA_CHECK(cudaGetLastError());
  }
}

Plan bwd_plan(const LayerNormBwdArgs& a) {
  int32_t tpr = a.threads_per_row > 0 ? a.threads_per_row : ln::current_override().bwd_tpr;
  if (tpr <= 0) tpr = ln::default_bwd_tpr(a.dtype, a.cols);
  return make_plan(a.dtype, a.cols, tpr,
                   aligned16(a.x) && aligned16(a.dy) && aligned16(a.dx) && aligned16(a.weight) &&
                       aligned16(a.workspace));
}

template <typename T>
void backward_typed(const LayerNormBwdArgs& a) {
  const auto stream = static_cast<cudaStream_t>(a.stream);
  const Plan plan = bwd_plan(a);
  int64_t parts = 1;
  if (plan.vectorized) {
    parts = bwd_parts<T>(plan, a.rows);
    by_plan<T, BwdLaunch>(plan, a, parts, stream);
  } else {
    XRT_CUDA_CHECK(cudaMemsetAsync(a.workspace, 0, 2 * a.cols * sizeof(float), stream));
    ln::ln_bwd_scalar_kernel<T><<<static_cast<unsigned>(scalar_grid(a.rows)), ln::kScalarThreads, 0, stream>>>(a);
    XRT_CUDA_CHECK(cudaGetLastError());
  }
  if (a.dweight != nullptr || a.dbias != nullptr) {
    const dim3 block(32, 8);
    const auto grid = static_cast<unsigned>((a.cols + 31) / 32);
    ln::ln_bwd_reduce_parts<T><<<grid, block, 0, stream>>>(a.workspace, parts, a.cols,
                                                           static_cast<T*>(a.dweight),
                                                           static_cast<T*>(a.dbias));
    XRT_CUDA_CHECK(cudaGetLastError());
  }
}

template <typename Fn>
void by_dtype(KernelDType t, Fn&& fn) {
  switch (t) {
    case KernelDType::kFloat32: fn(float{}); break;
    case KernelDType::kFloat16: fn(__half{}); break;
    case KernelDType::kBFloat16: fn(__nv_bfloat16{}); break;
    default: XRT_THROW(InvalidArgumentError, "layernorm: dtype must be float32, float16 or bfloat16");
  }
}

void check_shape(int64_t rows, int64_t cols) {
  XRT_CHECK(rows >= 0 && cols > 0, InvalidArgumentError, "layernorm: need rows >= 0 and cols > 0 (got ",
            rows, " x ", cols, ")");
}

}  // namespace

void layernorm_forward(const LayerNormFwdArgs& a) {
  check_shape(a.rows, a.cols);
  XRT_CHECK(a.x != nullptr && a.y != nullptr && (a.mean == nullptr) == (a.rstd == nullptr),
            InvalidArgumentError,
            "layernorm forward: x and y must be given, and mean and rstd both or neither");
  if (a.rows == 0) return;
  by_dtype(a.dtype, [&](auto tag) { forward_typed<decltype(tag)>(a); });
}

int64_t layernorm_backward_workspace_bytes(const LayerNormBwdArgs& a) {
  check_shape(a.rows, a.cols);
  const Plan plan = bwd_plan(a);
  int64_t parts = 1;
  if (plan.vectorized) {
    by_dtype(a.dtype, [&](auto tag) { parts = bwd_parts<decltype(tag)>(plan, a.rows); });
  }
  return 2 * parts * a.cols * static_cast<int64_t>(sizeof(float));
}

void layernorm_backward(const LayerNormBwdArgs& a) {
  check_shape(a.rows, a.cols);
  XRT_CHECK(a.x != nullptr && a.dy != nullptr && a.dx != nullptr && a.mean != nullptr &&
                a.rstd != nullptr && a.workspace != nullptr,
            InvalidArgumentError, "layernorm backward: dy, x, mean, rstd, dx and workspace must be given");
  const int64_t need = layernorm_backward_workspace_bytes(a);
  XRT_CHECK(a.workspace_bytes >= need, InvalidArgumentError, "layernorm backward: workspace of ",
            a.workspace_bytes, " bytes is too small (needs ", need, ")");
  if (a.rows == 0) {
    // Sums over no rows: zero gradients for weight and bias.
    const auto stream = static_cast<cudaStream_t>(a.stream);
    const int64_t bytes = a.cols * element_bytes(a.dtype);
    if (a.dweight != nullptr) XRT_CUDA_CHECK(cudaMemsetAsync(a.dweight, 0, bytes, stream));
    if (a.dbias != nullptr) XRT_CUDA_CHECK(cudaMemsetAsync(a.dbias, 0, bytes, stream));
    return;
  }
  by_dtype(a.dtype, [&](auto tag) { backward_typed<decltype(tag)>(a); });
}

KernelStatus layernorm_forward_entry(const LayerNormFwdArgs* args, char* err,
                                     std::size_t err_len) noexcept {
  return guarded([&] { layernorm_forward(*args); }, err, err_len);
}

KernelStatus layernorm_backward_entry(const LayerNormBwdArgs* args, char* err,
                                      std::size_t err_len) noexcept {
  return guarded([&] { layernorm_backward(*args); }, err, err_len);
}

KernelStatus layernorm_backward_workspace_entry(const LayerNormBwdArgs* args, int64_t* bytes,
                                                char* err, std::size_t err_len) noexcept {
  return guarded([&] { *bytes = layernorm_backward_workspace_bytes(*args); }, err, err_len);
}

KernelStatus layernorm_set_config_entry(const char* spec, char* err, std::size_t err_len) noexcept {
  return guarded([&] { ln::set_override(ln::parse_override(spec != nullptr ? spec : "")); }, err,
                 err_len);
}

KernelStatus layernorm_describe_config_entry(KernelDType dtype, int64_t rows, int64_t cols, char* out,
                                             std::size_t out_len) noexcept {
  return guarded(
      [&] {
        const std::string d = ln::describe(ln::resolve_fwd_config(dtype, rows, cols, 0));
        if (out != nullptr && out_len > 0) {
          std::strncpy(out, d.c_str(), out_len - 1);
          out[out_len - 1] = '\0';
        }
      },
      out, out_len);
}

}  // namespace xpuruntime::cuda_kernels
