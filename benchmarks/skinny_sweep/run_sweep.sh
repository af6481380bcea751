#!/usr/bin/env bash
# Tuning sweep of the skinny matmul kernel (not part of the build or of CI): builds
# skinny_sweep.cu once per tile configuration (the XRT_SKINNY_* macros of
# cpp/src/backends/cuda/kernels/blas/skinny_gemm.cu) and runs each next to
# cuBLAS. GPU time per call from CUDA graphs; "hot" reuses one B (L2-resident when
# it fits), "cold" rotates 8 copies of B (streamed from HBM).
# Usage, on the GPU machine from the repository root: benchmarks/skinny_sweep/run_sweep.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-${OUT:-$PWD/gpu-out}}; mkdir -p "$OUT"
D=/tmp/skinny-sweep; mkdir -p $D
build() {
  /usr/local/cuda/bin/nvcc -std=c++20 -O3 --expt-relaxed-constexpr -ccbin /usr/bin/g++ \
    -gencode arch=compute_90,code=sm_90 -I cpp/src -I cpp/include $2 benchmarks/skinny_sweep/skinny_sweep.cu \
    cpp/src/backends/cuda/cuda_check.cpp cpp/src/core/dtype.cpp -lcublas -o $D/$1 > $D/$1.log 2>&1 ||
    { echo "build $1 failed"; head -20 $D/$1.log; }
}
V=(
  "default|"
  "s4|-DXRT_SKINNY_STAGES=4"
  "s2|-DXRT_SKINNY_STAGES=2"
  "x16_c4|-DXRT_SKINNY_MAX_SPLITS=16 -DXRT_SKINNY_CTAS_PER_SM=4"
  "bn64|-DXRT_SKINNY_BLOCK_N=64"
  "bn256|-DXRT_SKINNY_BLOCK_N=256"
  "bk128|-DXRT_SKINNY_BLOCK_K=128"
)
for v in "${V[@]}"; do build "${v%%|*}" "${v#*|}" & done
wait
first=1
for v in "${V[@]}"; do
  n=${v%%|*}
  [ -x $D/$n ] || continue
  if [ $first = 1 ]; then timeout 60 $D/$n $n cublas; first=0; else timeout 60 $D/$n $n; fi
done 2>&1 | tee "$OUT/skinny_sweep.txt"
