// The CPU GEMM kernels in plain arguments (no Tensor, no registry): the registration
// file (cpu_matmul_kernels.cpp) and the tests call these.
//
//   cpu_blocked: ours. Cache-blocked (MC×KC panels of A, KC×NC panels of B, packed
//     into micro-panels), a register-tiled micro-kernel (AVX-512F or AVX2/FMA intrinsics,
//     the widest the CPU has, checked at run time; otherwise a portable loop nest that the
//     compiler vectorizes), OpenMP-parallel over (batch, row block, column block)
//     tiles. fp32 and fp64 natively; fp16/bf16 are converted to fp32 while packing
//     and accumulated in fp32. Any strides (transposes, broadcast batches).
//   cpu_blas: the OpenBLAS the build found (the system's, or scipy-openblas32 from
//     PyPI: cblas_api.h spells the names), cblas_sgemm/dgemm, one call per
//     batch; fp16/bf16 converted to fp32 blocks around sgemm. Compiled only with
//     XRT_HAVE_CBLAS; cpu_blas_available() says whether it is.
//
// All functions are thread-safe (no shared mutable state) and block until done.
#pragma once

#include <string>

#include "ops/matmul/gemm_problem.h"

namespace xpuruntime::matmul {

// Which micro-kernel cpu_blocked uses. kAuto picks the widest the CPU runs, checked at
// run time: kAvx512 (AVX-512F, 8×32 fp32 tiles), else kAvx2 (AVX2 + FMA, 6×16), else
// kPortable.
enum class CpuIsa : uint8_t { kAuto = 0, kPortable = 1, kAvx2 = 2, kAvx512 = 3 };

bool cpu_has_avx2_fma();
bool cpu_has_avx512f();
// What kAuto resolves to on this CPU.
CpuIsa cpu_best_isa();
// "portable", "avx2", "avx512"; kAuto: the name of cpu_best_isa().
std::string_view cpu_isa_name(CpuIsa isa);

// Throws InvalidArgumentError for a dtype other than fp32/fp64/fp16/bf16, or when
// kAvx2 (kAvx512) is requested on a CPU without AVX2/FMA (AVX-512F). threads <= 0:
// OpenMP's default.
void cpu_gemm_blocked(const GemmProblem& p, int threads = 0, CpuIsa isa = CpuIsa::kAuto);

bool cpu_blas_available();
// Sets OpenBLAS's thread count (process-wide; threads > 0) and returns the one it
// replaced; 0 without CBLAS. Thread-safe; cheap when the count does not change.
int cpu_blas_set_threads(int threads);
// OpenBLAS's config string and its source ("OpenBLAS 0.3.21 ... [system OpenBLAS]",
// "... [scipy-openblas32 from PyPI]") or why there is none ("built without CBLAS ...").
std::string cpu_blas_info();
// Throws BackendUnavailableError when built without CBLAS, InvalidArgumentError for
// an unsupported dtype. BLAS threading is the library's own (OPENBLAS_NUM_THREADS).
void cpu_gemm_blas(const GemmProblem& p);

}  // namespace xpuruntime::matmul
