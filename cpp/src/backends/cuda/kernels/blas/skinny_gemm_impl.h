// Our split-K tensor-core GEMM for decode-shaped problems (M <= 16): the "skinny"
// matmul kernel. Plain arguments, no Tensor and no registry (skinny_kernels.cpp
// registers it).
//
// Why it exists: with M <= 16 a GEMM is a stream over B (K x N), and what counts is
// how close a kernel gets to memory bandwidth. This kernel gives every CTA a
// 128-column strip of B and a slice of K, streams it through a 3-stage cp.async
// pipeline into swizzled shared memory, multiplies with mma.sync m16n8k16 (fp32
// accumulate), and reduces the K slices of one strip across a thread-block cluster
// through distributed shared memory (sm_90): no workspace, no atomics, no second
// kernel, a fixed summation order (deterministic) and safe under graph capture.
//
// Measured on an H200 (GPU time in CUDA graphs, benchmarks/skinny_sweep, results in
// benchmarks/results/skinny_sweep_NVIDIA_H200.json): on
// par with cuBLAS where B streams from HBM (16x4096x4096: 12.0 us vs 12.9; 16x4096
// x11008: 24.9 vs 27.1), 10-20% slower where B sits in L2 or the problem is tiny
// (8x768x768: 4.9 us vs 3.3). The tile shape and depth were swept (block N 64-256,
// block K 64-128, 2-8 stages, 1-16 slices): per-SM throughput stays near 23 GB/s
// whatever the bytes in flight, which points at the cp.async (LDGSTS) path itself.
// Row-by-row TMA bulk copies (cp.async.bulk) were 4-5x slower still. Two more
// designs lost to this kernel on an H100 where B is 32 MiB or more, and are kept
// only as experiments in benchmarks/skinny_sweep/ with their results: a 2-D
// tensor-map TMA ring with a producer thread and mbarriers (best 14.4 us hot on
// 16x4096x4096 against this kernel's 11.4) and register streaming without
// shared-memory staging (13-17 us).
//
// How far any kernel could go on 16x4096x4096 (H100, benchmarks/skinny_sweep/
// bw_probe.cu, benchmarks/results/bw_probe_NVIDIA_H100.json): merely reading B's
// 32 MiB takes 5.9 us from L2 and 12.6 us from HBM, against torch's cuBLAS GEMM at
// 8.6 and 16.1 us (bench_matmul, matmul_h100.json). From HBM no kernel can be more
// than 1.28x faster than cuBLAS there; this one is 1.00x. From L2 it is 0.78x.
#pragma once

#include <string>

#include "ops/matmul/gemm_problem.h"

namespace xpuruntime::matmul {

// Largest M the kernel takes (one m16 MMA tile; rows past M are zero padding).
inline constexpr int64_t kSkinnyMaxM = 16;
// Thread-block clusters and distributed shared memory need sm_90.
inline constexpr int kSkinnyMinCapability = 90;

// Why the skinny kernel cannot run p (empty when it can): dtype (fp16/bf16 only),
// M > 16. Any strides are fine: aligned, contiguous operands take the cp.async
// path, others a slower path of element loads with the same results.
GemmRejection skinny_rejection(const GemmProblem& p);

// How many K slices (cluster size) the kernel would use for p on a GPU with
// `sm_count` multiprocessors; for decision details and tests.
int skinny_splits(const GemmProblem& p, int sm_count);

// Enqueues C = act(A·B + bias) on `stream` of CUDA device `device`. Throws
// InvalidArgumentError when skinny_rejection(p) is not empty, CudaError on a
// launch failure.
void skinny_gemm(const GemmProblem& p, void* stream, int device);

}  // namespace xpuruntime::matmul
