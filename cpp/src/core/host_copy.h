// Strided copies in host memory, shared by the tensor code and the host-memory
// backends (cpu, null).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace xpuruntime {

// Copies a strided view (strides in elements) to another; the innermost run is
// copied with memcpy when both sides are contiguous there.
void host_strided_copy(char* dst, std::span<const int64_t> dst_strides, const char* src,
                       std::span<const int64_t> src_strides, std::span<const int64_t> shape,
                       std::size_t esize);

}  // namespace xpuruntime
