#!/usr/bin/env bash
# Builds and runs the TMA experiment's sweep (tma_sweep.cu) on the GPU machine; the
# table goes to stdout and $OUT/tma_sweep.txt. Not part of the build or of CI.
# Usage, from the repository root: benchmarks/skinny_sweep/run_tma_sweep.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-${OUT:-$PWD/gpu-out}}; mkdir -p "$OUT"
/usr/local/cuda/bin/nvcc -std=c++20 -O3 --expt-relaxed-constexpr -ccbin /usr/bin/g++ -Xptxas -v \
  -gencode arch=compute_90,code=sm_90 -I cpp/src -I cpp/include \
  benchmarks/skinny_sweep/tma_sweep.cu cpp/src/backends/cuda/cuda_check.cpp cpp/src/core/dtype.cpp \
  -lcublas -o /tmp/tma_sweep > "$OUT/tma_sweep_build.log" 2>&1 || { grep -B2 -A3 error "$OUT/tma_sweep_build.log" | head -40; exit 1; }
timeout 300 /tmp/tma_sweep 2>&1 | tee "$OUT/tma_sweep.txt"
