// Entry points of the built-in CPU plugin that plugin_lookup("cpu", name) returns
// (plugin.h), for callers that must not include backends/ headers (the bindings).
// The CPU plugin is linked into the core, so these may use C++ types.
#pragma once

#include <cstddef>
#include <string>

namespace xpuruntime::cpu {

namespace entry {
inline constexpr const char* kScratchPeakBytes = "scratch_peak_bytes";  // ScratchPeakBytesEntry
inline constexpr const char* kGemmInfo = "cpu_gemm_info";               // GemmInfoEntry
inline constexpr const char* kKernelInfo = "cpu_kernel_info";           // KernelInfoEntry
}  // namespace entry

// The largest per-thread scratch the CPU GEMM paths have held in this process (bytes).
using ScratchPeakBytesEntry = std::size_t (*)() noexcept;
// How the CPU GEMM is built: the SIMD path it runs ("avx2", "portable"), whether a
// BLAS library is linked and which. Null pointers are skipped.
using GemmInfoEntry = void (*)(std::string* isa, bool* blas_available, std::string* blas);
// The other CPU kernels: the x86-64 level whose compiled clones the vectorized loops
// run (isa_clones.h), and the oneDNN library the onednn kernels use (or why none).
using KernelInfoEntry = void (*)(std::string* vector_isa, std::string* onednn);

}  // namespace xpuruntime::cpu
