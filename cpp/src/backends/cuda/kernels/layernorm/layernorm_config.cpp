// Forward launch configuration: the per-shape default and the run-time override
// used by the sweep (benchmarks/sweep_layernorm.py). Plain C++: the kernels'
// launcher (layernorm.cu) asks resolve_fwd_config() once per launch.
#include "backends/cuda/kernels/layernorm/layernorm_config.h"

#include <atomic>
#include <cstdlib>
#include <sstream>

#include "xpuruntime/error.h"

namespace xpuruntime::cuda_kernels::ln {
namespace {

// Mirrors ln::LnHint in layernorm_kernel.cuh (this file has no CUDA headers).
constexpr int32_t kHintDefault = 0, kHintStreaming = 1, kHintNoL1 = 2;

// The override lives in relaxed atomics: launches read it on every call, a sweep
// writes it between calls. A launch racing a set may see a mix of old and new
// fields; every mix is a valid configuration.
struct AtomicOverride {
  std::atomic<int32_t> tpr{0}, grid{0}, hint{-1}, prefetch{-1}, bwd_tpr{0};
};

AtomicOverride& store() {
  static AtomicOverride s;
  return s;
}

void store_override(const LnOverride& o) {
  AtomicOverride& s = store();
  s.tpr.store(o.fwd.tpr, std::memory_order_relaxed);
  s.grid.store(static_cast<int32_t>(o.fwd.grid), std::memory_order_relaxed);
  s.hint.store(o.fwd.hint, std::memory_order_relaxed);
  s.prefetch.store(o.fwd.prefetch, std::memory_order_relaxed);
  s.bwd_tpr.store(o.bwd_tpr, std::memory_order_relaxed);
}

// XRT_LN_CONFIG applies from the first launch (or set_override) on. A bad value
// throws from every launch (a throwing static initialiser is retried) rather
// than being ignored.
void ensure_env_read() {
  static const bool once = [] {
    const char* env = std::getenv("XRT_LN_CONFIG");
    if (env != nullptr && *env != '\0') store_override(parse_override(env));
    return true;
  }();
  (void)once;
}

int32_t parse_tpr(const std::string& key, const std::string& v) {
  int32_t n = 0;
  try {
    n = std::stoi(v);
  } catch (const std::exception&) {
    XRT_THROW(InvalidArgumentError, "XRT_LN_CONFIG: ", key, "=", v, " is not a number");
  }
  const bool pow2 = n >= 32 && n <= 1024 && (n & (n - 1)) == 0;
  XRT_CHECK(n == 0 || pow2, InvalidArgumentError, "XRT_LN_CONFIG: ", key,
            " must be 0 or a power of two in [32, 1024], got ", v);
  return n;
}

}  // namespace

// The default per shape. This is the one function to edit when a sweep on a new
// device finds a better configuration (benchmarks/sweep_layernorm.py prints the
// best one per shape). Rules in 16-byte vectors per row (n_vec: 8 bf16/fp16 or 4
// fp32 elements each), from the H200 sweep of 2026-11 (us, kernel device time):
//  * The smallest power-of-two group with at most 4 vectors a thread: more bytes
//    per thread beat more threads per row (32768x4096 bf16: 128 threads 142,
//    256 threads 150, 512 threads 166). Rows up to 128 vectors (1024 bf16) get one
//    warp, so their reductions are shuffles only (8192x768 bf16: 32 x 3, 10.8).
//  * Persistent grid with the next row prefetched (4096 bf16 at 128 threads:
//    142 vs 145 without prefetch, 151 with a tile grid).
//  * fp32 rows of more than 128 vectors: tile grid without prefetch. Their raw
//    prefetch copy and unpacked weight/bias cost twice the registers of 16-bit
//    types (32768x4096 fp32 at 256 threads: 270 tile vs 277 persistent+prefetch).
//  * Default cache hints: streaming hints (cs, nol1) were no better at any shape.
FwdConfig default_fwd_config(KernelDType dtype, int64_t rows, int64_t cols) {
  (void)rows;
  const int64_t n_vec = cols / (dtype == KernelDType::kFloat32 ? 4 : 8);
  FwdConfig c;
  c.tpr = 32;
  while (c.tpr < 1024 && static_cast<int64_t>(c.tpr) * 4 < n_vec) c.tpr *= 2;
  const bool fp32_long = dtype == KernelDType::kFloat32 && n_vec > 128;
  c.grid = fp32_long ? LnGrid::kTile : LnGrid::kPersistent;
  c.prefetch = fp32_long ? 0 : 1;
  c.hint = kHintDefault;
  return c;
}

// Backward: one vector a thread up to 512 threads a row, then more vectors. The
// 1024-thread variant is held to 64 registers by its launch bounds and spills
// (32768x4096 fp32: 436 us at 512 threads x 2 vectors, 607 at 1024 x 1; 4096
// bf16 is best at 512 x 1: 265, 256 x 2: 299).
int32_t default_bwd_tpr(KernelDType dtype, int64_t cols) {
  const int64_t n_vec = cols / (dtype == KernelDType::kFloat32 ? 4 : 8);
  int32_t tpr = 32;
  while (tpr < 512 && tpr < n_vec) tpr *= 2;
  return static_cast<int64_t>(tpr) * 4 < n_vec ? 1024 : tpr;  // > 2048 vectors: 1024 threads
}

LnOverride parse_override(const std::string& spec) {
  LnOverride o;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    XRT_CHECK(eq != std::string::npos, InvalidArgumentError, "XRT_LN_CONFIG: '", item,
              "' is not key=value (keys: tpr, grid, hint, prefetch, bwd_tpr)");
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (k == "tpr") {
      o.fwd.tpr = parse_tpr(k, v);
    } else if (k == "bwd_tpr") {
      o.bwd_tpr = parse_tpr(k, v);
    } else if (k == "grid") {
      if (v == "auto") o.fwd.grid = LnGrid::kAuto;
      else if (v == "persistent") o.fwd.grid = LnGrid::kPersistent;
      else if (v == "tile") o.fwd.grid = LnGrid::kTile;
      else XRT_THROW(InvalidArgumentError, "XRT_LN_CONFIG: grid must be auto, persistent or tile, got ", v);
    } else if (k == "hint") {
      if (v == "auto") o.fwd.hint = -1;
      else if (v == "default") o.fwd.hint = kHintDefault;
      else if (v == "cs") o.fwd.hint = kHintStreaming;
      else if (v == "nol1") o.fwd.hint = kHintNoL1;
      else XRT_THROW(InvalidArgumentError, "XRT_LN_CONFIG: hint must be auto, default, cs or nol1, got ", v);
    } else if (k == "prefetch") {
      if (v == "auto") o.fwd.prefetch = -1;
      else if (v == "0" || v == "1") o.fwd.prefetch = v == "1" ? 1 : 0;
      else XRT_THROW(InvalidArgumentError, "XRT_LN_CONFIG: prefetch must be auto, 0 or 1, got ", v);
    } else {
      XRT_THROW(InvalidArgumentError, "XRT_LN_CONFIG: unknown key '", k,
                "' (keys: tpr, grid, hint, prefetch, bwd_tpr)");
    }
  }
  return o;
}

void set_override(const LnOverride& o) {
  ensure_env_read();  // read first, so that the environment cannot replace o later
  store_override(o);
}

LnOverride current_override() {
  ensure_env_read();
  const AtomicOverride& s = store();
  LnOverride o;
  o.fwd.tpr = s.tpr.load(std::memory_order_relaxed);
  o.fwd.grid = static_cast<LnGrid>(s.grid.load(std::memory_order_relaxed));
  o.fwd.hint = s.hint.load(std::memory_order_relaxed);
  o.fwd.prefetch = s.prefetch.load(std::memory_order_relaxed);
  o.bwd_tpr = s.bwd_tpr.load(std::memory_order_relaxed);
  return o;
}

FwdConfig resolve_fwd_config(KernelDType dtype, int64_t rows, int64_t cols, int32_t tpr_arg) {
  FwdConfig c = default_fwd_config(dtype, rows, cols);
  const FwdConfig o = current_override().fwd;
  if (o.tpr > 0) c.tpr = o.tpr;
  if (o.grid != LnGrid::kAuto) c.grid = o.grid;
  if (o.hint >= 0) c.hint = o.hint;
  if (o.prefetch >= 0) c.prefetch = o.prefetch;
  if (tpr_arg > 0) c.tpr = tpr_arg;
  return c;
}

std::string describe(const FwdConfig& c) {
  static const char* const kHints[] = {"default", "cs", "nol1"};
  std::ostringstream os;
  os << "tpr=" << c.tpr << ",grid="
     << (c.grid == LnGrid::kTile ? "tile" : c.grid == LnGrid::kPersistent ? "persistent" : "auto")
     << ",hint=" << (c.hint >= 0 && c.hint <= 2 ? kHints[c.hint] : "auto") << ",prefetch=" << c.prefetch;
  return os.str();
}

}  // namespace xpuruntime::cuda_kernels::ln
