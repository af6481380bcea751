#!/usr/bin/env bash
# Sets up everything and runs every test: the C++ suites (CTest), the same suites
# under AddressSanitizer + UndefinedBehaviorSanitizer, and the Python suites.
# GPU tests skip with their reason where no CUDA device exists.
# Usage: ./scripts/test.sh            (what CI runs through .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
PY=${PYTHON:-python3}

echo "== system packages (Debian): GoogleTest, OpenBLAS, Ninja"
need=()
for pkg in libgtest-dev libopenblas-dev ninja-build; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${need[@]}"
fi

echo "== build and install the package with its C++ tests (CUDA sources compile where nvcc exists)"
$PY -m pip install -q ".[test]" -Ccmake.define.XRT_BUILD_TESTS=ON
BUILD_DIR=$(ls -d build/cp3*/ | head -n 1)

echo "== C++ tests ($BUILD_DIR)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"

echo "== C++ tests under AddressSanitizer + UndefinedBehaviorSanitizer (CPU build)"
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DXRT_CUDA=OFF -DXRT_BUILD_PYTHON=OFF \
  -DXRT_BUILD_TESTS=ON -DXRT_SANITIZE=ON >/dev/null
cmake --build build/asan -j "$JOBS"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build/asan --output-on-failure -j "$JOBS"

echo "== Python tests"
$PY -m pytest -q -ra -m "not slow" tests/python tests/gpu

echo "== fuzzers: libFuzzer under ASan + UBSan (plan loader, policy JSON, graph compiler) and the Python session fuzzer, from their committed corpora"
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
JOBS=$JOBS ./scripts/run_fuzzers.sh "$FUZZ_SECONDS"
FUZZ_TMP=$(mktemp -d)
(cd "$FUZZ_TMP" && $PY "$OLDPWD/fuzz/py_session_fuzzer.py" -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 2>&1 | tail -4)
rm -rf "$FUZZ_TMP"
