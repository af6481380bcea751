#!/usr/bin/env bash
# Builds and runs bw_probe.cu on the GPU machine: the pure-read floor under a
# 16x4096x4096 decode GEMM next to cuBLAS. Writes benchmarks/results/bw_probe_<GPU>.json
# (and a copy under $OUT). Not part of the build or of CI.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-${OUT:-$PWD/gpu-out}}; mkdir -p "$OUT"
/usr/local/cuda/bin/nvcc -std=c++17 -O3 -ccbin /usr/bin/g++ -gencode arch=compute_90,code=sm_90 \
  benchmarks/skinny_sweep/bw_probe.cu -lcublas -o /tmp/bw_probe || exit 1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oE '[HABL][0-9]{2,3}' | head -1)
/tmp/bw_probe "benchmarks/results/bw_probe_NVIDIA_${gpu:-GPU}.json" && cp benchmarks/results/bw_probe_NVIDIA_${gpu:-GPU}.json "$OUT/"
