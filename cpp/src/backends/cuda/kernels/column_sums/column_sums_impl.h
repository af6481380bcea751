// Column sums of a row-major [rows, cols] fp16/bf16 matrix: the bias gradient of a
// linear layer (its output gradient summed over the tokens). The argument struct is
// the plugin's C ABI (xpuruntime/cuda_kernels_abi.h).
//
// Two stages, both deterministic: row slices ("parts") write fp32 partial sums to
// `workspace` ([parts, cols]), then one thread per column adds the parts in order
// and rounds once to the output dtype. The number of parts depends only on the
// shape (column_sums_parts) and the path only on the shape, the row stride and
// 16-byte alignment, so results are the same bits on every GPU.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "xpuruntime/cuda_kernels_abi.h"

namespace xpuruntime::cuda_kernels {

// Threads of a stage-1 CTA cover 256 columns (32 lanes x 8 columns of 16 bytes) and
// 8 row lanes; a part is at least 64 rows, and the grid aims at about 1024 CTAs.
inline constexpr int64_t kColSumBlockCols = 256;
inline int64_t column_sums_parts(int64_t rows, int64_t cols) {
  const int64_t col_blocks = std::max<int64_t>(1, (cols + kColSumBlockCols - 1) / kColSumBlockCols);
  const int64_t by_grid = std::max<int64_t>(1, 1024 / col_blocks);
  const int64_t by_rows = std::max<int64_t>(1, (rows + 63) / 64);
  return std::min(by_grid, by_rows);
}
inline int64_t column_sums_workspace_bytes(int64_t rows, int64_t cols) {
  return column_sums_parts(rows, cols) * std::max<int64_t>(cols, 0) * 4;
}

// Enqueues both stages on args.stream (current device). Throws InvalidArgumentError
// for a bad shape, stride or a short workspace, CudaError when a launch fails.
void column_sums(const ColumnSumsArgs& args);

// Entry points (plugin_lookup names entry::kColumnSums / kColumnSumsWorkspace).
KernelStatus column_sums_entry(const ColumnSumsArgs* args, char* err, std::size_t err_len) noexcept;
KernelStatus column_sums_workspace_entry(int64_t rows, int64_t cols, int64_t* bytes, char* err,
                                         std::size_t err_len) noexcept;

}  // namespace xpuruntime::cuda_kernels
