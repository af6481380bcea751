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
set -Eeuo pipefail  # -E: the ERR trap below also reports failures inside functions
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SECS=${1:-60}
[ $# -gt 0 ] && shift
BUILD=${BUILD_DIR:-build/fuzz}
JOBS=${JOBS:-$(nproc)}

# Every failure says where it happened: the stage and the command that failed.
stage="start"
trap 'rc=$?; echo "run_fuzzers.sh: FAILED (exit $rc) in stage \"$stage\", line $LINENO: $BASH_COMMAND" >&2' ERR
die() { echo "run_fuzzers.sh: FAILED in stage \"$stage\": $*" >&2; trap - ERR; exit 1; }

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
# Prints nothing (and succeeds) when none of the versions is on the PATH.
pick_clang() {
  local v
  for v in ${CLANG_VERSION:-19 18 17 16}; do
    if command -v "clang++-$v" >/dev/null 2>&1; then echo "$v"; return 0; fi
  done
  return 0
}
# apt-get install as root (or through sudo), waiting for another apt/dpkg to finish.
apt_install() {
  command -v apt-get >/dev/null 2>&1 \
    || die "no apt-get to install $* (not Debian/Ubuntu): install clang >= 16 with its libFuzzer" \
           "runtime (compiler-rt) and rerun, or name an installed clang++-NN with CLANG_VERSION=NN"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "installing $* needs root: run as root or install sudo"
    sudo=(sudo)
  fi
  echo "== apt-get install $*"
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 update -qq \
    || die "apt-get update failed (output above): check the network and /etc/apt/sources.list"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y \
    --no-install-recommends "$@" \
    || die "apt-get could not install $* (output above); Debian 12 has clang-16," \
           "other versions come from apt.llvm.org"
}
# Whether clang++-$1 compiles and links a libFuzzer target under ASan + UBSan (Debian
# ships the runtime apart from the compiler, in libclang-rt-NN-dev).
links_fuzzer() {
  local tmp rc=0
  tmp=$(mktemp -d)
  printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
    'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' >"$tmp/t.cpp"
  "clang++-$1" -fsanitize=fuzzer,address,undefined "$tmp/t.cpp" -o "$tmp/t" >"$tmp/log" 2>&1 || rc=$?
  [ $rc -eq 0 ] || sed 's/^/    /' "$tmp/log" | tail -5 >&2
  rm -rf "$tmp"
  return $rc
}

stage="find clang >= 16"
CLANG_V=$(pick_clang)
if [ -z "$CLANG_V" ]; then
  want=${CLANG_VERSION:-16}
  want=${want%% *}
  echo "== no clang++-${CLANG_VERSION:-16..19} on the PATH; installing clang-$want with libFuzzer (Debian packages)"
  stage="install clang-$want"
  apt_install "clang-$want" "libclang-rt-$want-dev"
  CLANG_V=$(pick_clang)
  [ -n "$CLANG_V" ] || die "clang++-$want is still not on the PATH after installing clang-$want"
fi
echo "== clang $CLANG_V: $(command -v "clang++-$CLANG_V")"
stage="check that clang++-$CLANG_V links a libFuzzer target"
if ! links_fuzzer "$CLANG_V"; then
  echo "== clang++-$CLANG_V cannot link -fsanitize=fuzzer: installing its runtime (libclang-rt-$CLANG_V-dev)"
  stage="install libclang-rt-$CLANG_V-dev"
  apt_install "libclang-rt-$CLANG_V-dev"
  stage="check that clang++-$CLANG_V links a libFuzzer target"
  links_fuzzer "$CLANG_V" || die "clang++-$CLANG_V still cannot link a libFuzzer target (output above)"
fi

launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
stage="configure the fuzzers ($BUILD, clang $CLANG_V)"
# A build folder configured with another compiler would make CMake stop: start it afresh.
if [ -f "$BUILD/CMakeCache.txt" ] \
    && ! grep -q "^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++-$CLANG_V\$" "$BUILD/CMakeCache.txt"; then
  echo "== $BUILD was configured with another compiler: removing its CMake cache"
  rm -rf "$BUILD/CMakeCache.txt" "$BUILD/CMakeFiles"
fi
echo "== build the fuzzers ($BUILD, clang $CLANG_V, $JOBS jobs)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="clang-$CLANG_V" \
  -DCMAKE_CXX_COMPILER="clang++-$CLANG_V" -DXRT_BUILD_FUZZERS=ON -DXRT_BUILD_PYTHON=OFF \
  -DXRT_BUILD_TESTS=OFF -DXRT_CUDA=OFF -DXRT_ONEDNN=OFF "${launcher[@]}" >/dev/null
targets=()
for f in "${FUZZERS[@]}"; do targets+=("${f}_fuzzer"); done
stage="build the fuzzers ($BUILD, clang $CLANG_V)"
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
failed=()
for f in "${FUZZERS[@]}"; do
  stage="run $f"
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
