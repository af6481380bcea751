#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang under ASan + UBSan (the whole
# core instrumented: XRT_BUILD_FUZZERS=ON) and runs each one for a bounded time
# from its committed seed corpus fuzz/corpus/<name>/. New inputs a run finds go to
# the build folder, not to the committed corpus; a crash leaves its input in
# $BUILD/artifacts/ and fails the script (turn it into a regression test).
#
# Usage: scripts/run_fuzzers.sh [SECONDS_PER_FUZZER] [NAME...]
#   SECONDS_PER_FUZZER  libFuzzer -max_total_time for each fuzzer (default 60)
#   NAME...             a subset of FUZZERS below (default: all)
# Environment: BUILD_DIR (default build/fuzz), JOBS (default: nproc),
#   FUZZ_RUNS  run this many inputs from seed FUZZ_SEED (default 1) instead of for
#              a time; 0 replays the seed corpus (every committed input once) and
#              explores nothing, which is what CI does (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SECS=${1:-60}
[ $# -gt 0 ] && shift
BUILD=${BUILD_DIR:-build/fuzz}
JOBS=${JOBS:-$(nproc)}

# One fuzzer per line: NAME builds bin/NAME_fuzzer (fuzz/CMakeLists.txt) and reads
# its seeds from fuzz/corpus/NAME/.
FUZZERS=(
  plan_loader
  policy_json
  onnx_graph
)
[ $# -gt 0 ] && FUZZERS=("$@")

# clang 16 or newer: the core uses C++20 that clang 14 (Debian 12's default) rejects
# (structured bindings captured by lambdas). CLANG_VERSION picks one; otherwise the
# newest installed clang-NN >= 16, installing clang-16 (Debian) when there is none.
pick_clang() {
  for v in ${CLANG_VERSION:-19 18 17 16}; do
    command -v "clang++-$v" >/dev/null 2>&1 && { echo "$v"; return; }
  done
}
CLANG_V=$(pick_clang)
if [ -z "$CLANG_V" ]; then
  echo "== system packages (Debian): clang-16 with libFuzzer"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq clang-16 libclang-rt-16-dev
  CLANG_V=16
fi

launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
echo "== build the fuzzers ($BUILD, clang $CLANG_V)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="clang-$CLANG_V" \
  -DCMAKE_CXX_COMPILER="clang++-$CLANG_V" -DXRT_BUILD_FUZZERS=ON -DXRT_BUILD_PYTHON=OFF \
  -DXRT_BUILD_TESTS=OFF -DXRT_CUDA=OFF -DXRT_ONEDNN=OFF "${launcher[@]}" >/dev/null
targets=()
for f in "${FUZZERS[@]}"; do targets+=("${f}_fuzzer"); done
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
failed=()
for f in "${FUZZERS[@]}"; do
  seeds="$ROOT/fuzz/corpus/$f"
  work="$BUILD/corpus/$f"
  mkdir -p "$work" "$BUILD/artifacts"
  if [ -n "${FUZZ_RUNS:-}" ]; then
    budget=(-runs="$FUZZ_RUNS" -seed="${FUZZ_SEED:-1}")
    echo "== $f: $FUZZ_RUNS inputs (seed ${FUZZ_SEED:-1}; 0: replay only) from $(find "$seeds" -type f | wc -l) seeds"
  else
    budget=(-max_total_time="$SECS")
    echo "== $f: ${SECS}s from $(find "$seeds" -type f | wc -l) seeds"
  fi
  rm -rf "$work" && mkdir -p "$work"  # a fresh work corpus: each run starts from the seeds
  if ! "$BUILD/bin/${f}_fuzzer" "${budget[@]}" -timeout=30 -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$f-" "$work" "$seeds"; then
    failed+=("$f")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzers that found a crash: ${failed[*]} (inputs in $BUILD/artifacts/)" >&2
  exit 1
fi
if [ -n "${FUZZ_RUNS:-}" ]; then
  echo "== every fuzzer ran its seeds and $FUZZ_RUNS new inputs without a finding"
else
  echo "== every fuzzer ran ${SECS}s without a finding"
fi
