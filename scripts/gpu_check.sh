#!/usr/bin/env bash
# The GPU machine's run: build from source (sm_90), then `tests` runs the GPU test
# suites and `bench` the benchmarks; logs and result files go to $OUT (or ./gpu-out).
# Usage: scripts/gpu_check.sh tests|bench|sanitize|all|build
#   sanitize: compute-sanitizer memcheck, racecheck and synccheck over the C++ GPU suites of
#   our CUDA kernels, memcheck over one fp32 and one fp16 run of each zoo model through the
#   native CUDA engine; logs under $OUT/sanitize_*.log, nonzero exit on any error.
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
if [ "$STAGE" = sanitize ]; then
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  # Our kernels' suites: the CUDA op kernels, cuDNN conv and the GEMMs (C++), flash_v2,
  # LayerNorm, skinny GEMM and column sums (Python, through torch).
  KERNELS='CudaOp*:CudaFused*:CudnnConv*:GemmCuda*:CudaProvider*'
  PYSUITES="tests/gpu/test_layernorm_gpu.py tests/gpu/test_column_sums_gpu.py tests/gpu/test_skinny_gemm_gpu.py tests/gpu/test_attention_gpu.py"
  for tool in memcheck racecheck synccheck; do
    timeout 900 "$CS" --tool $tool --error-exitcode 9 --log-file "$OUT/sanitize_${tool}_kernels.log" \
      "$B/bin/xrt_gpu_tests" --gtest_filter="$KERNELS" > "$OUT/sanitize_${tool}_kernels.out" 2>&1
    r=$?; echo "sanitize $tool C++ suites rc=$r"; rc=$((rc|r))
    timeout 1200 "$CS" --tool $tool --error-exitcode 9 --log-file "$OUT/sanitize_${tool}_py.log" \
      python3 -m pytest -q -x -p no:cacheprovider -m gpu $PYSUITES > "$OUT/sanitize_${tool}_py.out" 2>&1
    r=$?; echo "sanitize $tool Python suites rc=$r"; rc=$((rc|r))
  done
  # The zoo is exported outside the sanitizer (torch), then run through the engine under it.
  ZOO=$(python3 -c "import sys; sys.path.insert(0, 'tests/python'); import model_zoo as z; print(' '.join(str(z.export(n)) for n in z.MODELS))")
  timeout 1200 "$CS" --tool memcheck --error-exitcode 9 --log-file "$OUT/sanitize_memcheck_zoo.log" \
    python3 scripts/sanitize_native_cuda.py $ZOO > "$OUT/sanitize_memcheck_zoo.out" 2>&1
  r=$?; echo "sanitize memcheck zoo rc=$r"; tail -12 "$OUT/sanitize_memcheck_zoo.out"; rc=$((rc|r))
fi
exit $rc
