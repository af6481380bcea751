// Launch configuration of the fused LayerNorm forward kernel (no CUDA headers).
// The launcher asks default_fwd_config() for a shape; an override set at run time
// (the variable XRT_LN_CONFIG, read once at the first launch, or
// the layernorm_set_config entry from benchmarks/sweep_layernorm.py, which replaces
// the variable's) replaces any field it names. Spec syntax, comma separated, every key optional:
//   tpr=0|32|64|...|1024     threads per row (0: default)
//   grid=auto|persistent|tile
//   hint=auto|default|cs|nol1   cache hints of the streamed x loads / y stores
//   prefetch=auto|0|1        load the next row before the current row's reductions
//   bwd_tpr=0|32|...|1024    threads per row of the backward pass
// "" clears the override.
#pragma once

#include <cstdint>
#include <string>

#include "backends/cuda/kernels/layernorm/layernorm_impl.h"

namespace xpuruntime::cuda_kernels::ln {

enum class LnGrid : int32_t {
  kAuto = 0,
  kPersistent = 1,  // SMs x resident CTAs, each row group loops over rows
  kTile = 2,        // one row per row group, the hardware scheduler keeps SMs full
};

struct FwdConfig {
  int32_t tpr = 0;  // 0: auto
  LnGrid grid = LnGrid::kAuto;
  int32_t hint = -1;      // -1: auto, else ln::LnHint
  int32_t prefetch = -1;  // -1: auto, 0 or 1
};

struct LnOverride {
  FwdConfig fwd;
  int32_t bwd_tpr = 0;
};

// The forward configuration for a shape with no field left on auto.
FwdConfig default_fwd_config(KernelDType dtype, int64_t rows, int64_t cols);
// Threads per row of the backward pass for a row length.
int32_t default_bwd_tpr(KernelDType dtype, int64_t cols);

// Parses a spec (syntax above); throws InvalidArgumentError naming the bad part.
LnOverride parse_override(const std::string& spec);
void set_override(const LnOverride& o);
// The override now in force (XRT_LN_CONFIG until set_override is called).
LnOverride current_override();

// default_fwd_config with the override's non-auto fields on top, and an explicit
// threads_per_row argument (benchmarks) above both.
FwdConfig resolve_fwd_config(KernelDType dtype, int64_t rows, int64_t cols, int32_t tpr_arg);

// "tpr=256,grid=tile,hint=cs,prefetch=1" for logs and the sweep's table.
std::string describe(const FwdConfig& c);

}  // namespace xpuruntime::cuda_kernels::ln
