#!/usr/bin/env bash
# Builds and runs the streaming-path sweep (stream_sweep.cu) on the GPU machine, once
# per L2 fetch-size hint of the B loads; the tables go to stdout and
# $OUT/stream_sweep_<hint>.txt. Not part of the build or of CI.
# Usage, from the repository root: benchmarks/skinny_sweep/run_stream_sweep.sh [OUT_DIR] [HINTS...]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-${OUT:-$PWD/gpu-out}}; mkdir -p "$OUT"; shift || true
HINTS=("${@:-256B}")
D=/tmp/stream-sweep; mkdir -p $D
for h in "${HINTS[@]}"; do
  flag=".L2::$h"; [ "$h" = none ] && flag=""
  /usr/local/cuda/bin/nvcc -std=c++20 -O3 --expt-relaxed-constexpr -ccbin /usr/bin/g++ -Xptxas -v \
    -gencode arch=compute_90,code=sm_90 -I cpp/src -I cpp/include "-DXRT_SKINNY_STREAM_L2_HINT=\"$flag\"" \
    benchmarks/skinny_sweep/stream_sweep.cu cpp/src/backends/cuda/cuda_check.cpp cpp/src/core/dtype.cpp \
    -lcublas -o $D/stream_sweep_$h > "$OUT/stream_sweep_build_$h.log" 2>&1 || { tail -30 "$OUT/stream_sweep_build_$h.log"; exit 1; } &
done
wait
for h in "${HINTS[@]}"; do
  echo "== L2 hint: $h"
  timeout 300 $D/stream_sweep_$h 2>&1 | tee "$OUT/stream_sweep_$h.txt"
done
