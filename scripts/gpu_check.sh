#!/usr/bin/env bash
# The GPU machine's run: build from source (sm_90), then `tests` runs the GPU test
# suites and `bench` the benchmarks; logs and result files go to $OUT (or ./gpu-out).
# Usage: scripts/gpu_check.sh tests|bench|all
set -uo pipefail
cd "$(dirname "$0")/.."
STAGE=${1:-all}
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
B=${XRT_GPU_BUILD:-/tmp/xrt-gpu-build}
export PYTHONUNBUFFERED=1
# The system compiler: a toolchain linking its own libstdc++ statically mixes two
# copies of it with torch's in one Python process.
CC_ARGS=()
[ -x /usr/bin/g++ ] && CC_ARGS=(-DCMAKE_C_COMPILER=/usr/bin/gcc -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++)
GTEST_ARGS=()
[ -d .carry/googletest ] && GTEST_ARGS=(-DXRT_GTEST_SOURCE_DIR=$PWD/.carry/googletest)
if [ ! -f "$B/build.ninja" ]; then
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXRT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DXRT_BUILD_TESTS=ON -DPython_EXECUTABLE="$(command -v python3)" "${CC_ARGS[@]}" "${GTEST_ARGS[@]}" \
    > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
fi
ninja -C "$B" -j16 >> "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
export XRT_BUILD_DIR=$B PYTHONPATH=$PWD/python
python3 -c "import xpuruntime as x; print(x.get_all_devices()); print(repr(x.Tensor.empty([2,3],'float32','cuda:0')))" || exit 1
rc=0
if [ "$STAGE" = tests ] || [ "$STAGE" = all ]; then
  (cd "$B" && ctest -L gpu --output-on-failure -j4) > "$OUT/ctest_gpu.log" 2>&1; echo "ctest gpu rc=$?"; tail -4 "$OUT/ctest_gpu.log"
  timeout 420 python3 -m pytest -q -ra -p no:cacheprovider -m gpu tests/gpu tests/python > "$OUT/pytest_gpu.log" 2>&1
  r=$?; echo "pytest gpu rc=$r"; tail -25 "$OUT/pytest_gpu.log"; rc=$((rc|r))
fi
if [ "$STAGE" = bench ] || [ "$STAGE" = all ]; then
  # The logs go into the archive with the results: one file back, whatever the
  # number of benchmarks (the device tool returns at most 8 files).
  LOGS=$(mktemp -d)
  for b in bench_runtime bench_matmul bench_attention bench_layernorm bench_gpt2_step; do
    timeout 200 python3 benchmarks/$b.py > "$LOGS/$b.log" 2>&1; echo "$b rc=$?"; tail -14 "$LOGS/$b.log"
  done
  cp -r "$LOGS" benchmarks/results/logs
  tar czf "$OUT/results.tgz" benchmarks/results
  rm -rf benchmarks/results/logs "$LOGS"
fi
exit $rc
