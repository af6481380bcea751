// XRT_ISA_CLONES: compile a hot loop once per x86-64 microarchitecture level and let
// the loader pick the widest the CPU has (GCC function multiversioning, an ifunc
// resolved once per process). The library itself is built for the SSE2 baseline so it
// loads everywhere; this is for loops the compiler vectorizes (elementwise chains,
// reductions), whose speed scales with the vector width. Hand-written intrinsics
// kernels (the GEMM micro-kernels, the direct convolutions) pick their ISA themselves.
//
// Put [[gnu::flatten]] before it (C++ attributes first) when the loop
// calls inline helpers, so they are inlined into (and vectorized at the width of)
// each clone.
#pragma once

// GCC only: Clang 16 neither combines target_clones with flatten nor multiversions
// lambdas, so a Clang build (the fuzzers') runs the baseline loops.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(XRT_NO_ISA_CLONES)
#define XRT_HAVE_ISA_CLONES 1
#define XRT_ISA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
// The same for a lambda, with flatten:
// parallel_for(n, work, [&](int64_t b, int64_t e) XRT_ISA_LAMBDA { ... }).
// Only for loops of plain arithmetic: a call into code compiled for one ISA (the
// intrinsics kernels, a GEMM) is not inlined into the other clones.
#define XRT_ISA_LAMBDA \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), flatten))
#else
#define XRT_ISA_CLONES
#define XRT_ISA_LAMBDA
#endif

namespace xpuruntime::cpu {

// The clone the loader picks for XRT_ISA_CLONES functions on this CPU ("x86-64-v4",
// "x86-64-v3", or "baseline" for SSE2, a non-x86 CPU, or a build without clones).
inline const char* isa_clone_level() {
#ifdef XRT_HAVE_ISA_CLONES
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return "x86-64-v4";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2"))
    return "x86-64-v3";
#endif
  return "baseline";
}

}  // namespace xpuruntime::cpu
