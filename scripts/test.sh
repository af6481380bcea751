#!/usr/bin/env bash
# Sets up everything and runs every test: the C++ suites (CTest), the same suites
# under AddressSanitizer + UndefinedBehaviorSanitizer, the Python suites and the
# fuzzers' committed corpora. GPU tests skip with their reason where no CUDA device
# exists.
# Usage: ./scripts/test.sh            (what CI runs through .ci/run)
# Environment: PYTHON (default python3: the interpreter whose environment gets the
#   package and its test dependencies), JOBS (default: nproc), FUZZ_RUNS (default 0).
#
# Each stage prints "== [i/N] NAME" when it starts and "== [i/N] NAME: RESULT (time)"
# when it ends; a stage that cannot run says why. The last line is one summary of
# every stage, "test.sh: PASSED ..." or "test.sh: FAILED ...", also when the script
# is interrupted. The exit status is 0 only when every stage passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
JOBS=${JOBS:-$(nproc)}
PY=${PYTHON:-python3}
FUZZ_RUNS=${FUZZ_RUNS:-0}
LOGS=$(mktemp -d)
T0=$SECONDS

# --- stage bookkeeping -----------------------------------------------------------
STAGES=(apt build ctest asan-build asan-ctest pytest fuzz pyfuzz)
declare -A TITLE=(
  [apt]="system packages (Debian): GoogleTest, OpenBLAS, oneDNN, Ninja, libb64 (perf_analyzer)"
  [build]="build and install the package with its C++ tests and the test extra (pip)"
  [ctest]="C++ tests (CTest)"
  [asan-build]="build the C++ tests under AddressSanitizer + UndefinedBehaviorSanitizer (CPU)"
  [asan-ctest]="C++ tests under ASan + UBSan (CTest)"
  [pytest]="Python tests (pytest)"
  [fuzz]="fuzzers: the committed corpora replayed under ASan + UBSan (scripts/run_fuzzers.sh)"
  [pyfuzz]="Python session fuzzer (atheris, fixed seed) and the server request corpus"
)
declare -A RESULT=() TIME=() DETAIL=()
CURRENT=""

fmt_time() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
stage_index() {
  local i
  for i in "${!STAGES[@]}"; do [ "${STAGES[$i]}" = "$1" ] && echo $((i + 1)); done
}

# run_stage NAME COMMAND...: runs COMMAND (a function) as stage NAME, records its
# result and time, and prints both.
run_stage() {
  local name=$1 i rc start
  shift
  i=$(stage_index "$name")
  CURRENT=$name
  start=$SECONDS
  echo
  echo "== [$i/${#STAGES[@]}] ${TITLE[$name]}"
  "$@"
  rc=$?
  TIME[$name]=$((SECONDS - start))
  if [ $rc -eq 0 ]; then RESULT[$name]=ok; else RESULT[$name]="FAILED(exit $rc)"; fi
  CURRENT=""
  echo "== [$i/${#STAGES[@]}] $name: ${RESULT[$name]}${DETAIL[$name]:+ - ${DETAIL[$name]}}" \
    "($(fmt_time "${TIME[$name]}"))"
  return $rc
}
# skip_stage NAME REASON [skipped]: a stage that cannot run, and why. It counts as
# not passed unless the third argument says "skipped" (nothing to run on this platform).
skip_stage() {
  local i
  i=$(stage_index "$1")
  RESULT[$1]=${3:-"not run"}
  DETAIL[$1]=$2
  echo
  echo "== [$i/${#STAGES[@]}] $1: ${RESULT[$1]} - $2"
}
ok() { [ "${RESULT[$1]:-}" = ok ]; }

# The one summary line, printed on every exit (also on an error or an interrupt).
summary() {
  local rc=$? name parts=() failed=0
  trap - EXIT INT TERM
  if [ -n "$CURRENT" ]; then
    RESULT[$CURRENT]="INTERRUPTED"
    echo "== $CURRENT: interrupted (exit $rc)"
  fi
  for name in "${STAGES[@]}"; do
    local r=${RESULT[$name]:-not reached}
    case $r in ok | skipped) ;; *) failed=$((failed + 1)) ;; esac
    local p="$name $r"
    [ -n "${TIME[$name]:-}" ] && p+=" $(fmt_time "${TIME[$name]}")"
    [ -n "${DETAIL[$name]:-}" ] && p+=" (${DETAIL[$name]})"
    parts+=("$p")
  done
  local verdict="PASSED" code=0
  if [ $failed -gt 0 ] || [ $rc -ne 0 ]; then
    verdict="FAILED ($failed of ${#STAGES[@]} stages did not pass)"
    code=$rc
    [ "$code" -eq 0 ] && code=1
  fi
  rm -rf "$LOGS"
  local line="" p
  for p in "${parts[@]}"; do line+="${line:+ | }$p"; done
  echo
  echo "test.sh: $verdict in $(fmt_time $((SECONDS - T0))): $line"
  exit $code
}
trap summary EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- the stages ------------------------------------------------------------------
stage_apt() {
  local need=() pkg sudo=()
  for pkg in libgtest-dev libopenblas-dev libdnnl-dev ninja-build libb64-0d; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  if [ ${#need[@]} -eq 0 ]; then
    echo "all installed"
    DETAIL[apt]="already installed"
    return 0
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "missing ${need[*]} and no apt-get (not Debian/Ubuntu): install GoogleTest, OpenBLAS," \
      "oneDNN and Ninja with the system's package manager" >&2
    return 1
  fi
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "installing ${need[*]} needs root or sudo" >&2; return 1; }
    sudo=(sudo)
  fi
  echo "apt-get install ${need[*]}"
  DETAIL[apt]="installed ${need[*]}"
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 update -qq \
    && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y \
      -q "${need[@]}"
}

stage_build() {
  # -v shows the C++ build's progress ([n/N] lines from Ninja) instead of minutes of
  # silence; no progress bars (they do not render in CI logs).
  echo "$("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')," \
    "$JOBS jobs (CMAKE_BUILD_PARALLEL_LEVEL)"
  CMAKE_BUILD_PARALLEL_LEVEL=$JOBS "$PY" -m pip install -v --progress-bar off ".[test]" \
    -Ccmake.define.XRT_BUILD_TESTS=ON
}

BUILD_DIR=""
stage_ctest() {
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" 2>&1 | tee "$LOGS/ctest.log"
  local rc=${PIPESTATUS[0]}
  DETAIL[ctest]=$(grep -E "tests passed|tests failed" "$LOGS/ctest.log" | tail -n 1)
  return "$rc"
}

stage_asan_build() {
  cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DXRT_CUDA=OFF -DXRT_BUILD_PYTHON=OFF \
    -DXRT_BUILD_TESTS=ON -DXRT_SANITIZE=ON >/dev/null \
    && cmake --build build/asan -j "$JOBS"
}

stage_asan_ctest() {
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build/asan --output-on-failure -j "$JOBS" 2>&1 | tee "$LOGS/asan.log"
  local rc=${PIPESTATUS[0]}
  DETAIL[asan-ctest]=$(grep -E "tests passed|tests failed" "$LOGS/asan.log" | tail -n 1)
  return "$rc"
}

stage_pytest() {
  # pytest's own closing line ("N passed, ... in Ts") stays the last line it prints,
  # and is repeated in this stage's result.
  PYTHONUNBUFFERED=1 "$PY" -m pytest -q -ra -m "not slow" tests/python tests/gpu 2>&1 \
    | tee "$LOGS/pytest.log"
  local rc=${PIPESTATUS[0]}
  DETAIL[pytest]=$(grep -E "^=*.*[0-9]+ (passed|failed|error|errors|skipped)" "$LOGS/pytest.log" \
    | tail -n 1 | sed -E 's/^=+ //; s/ =+$//')
  return "$rc"
}

# CI replays, it does not explore: libFuzzer's exploration is not reproducible (the
# same seed took other paths in two runs of one build), and CI must pass or fail the
# same way for the same commit. Hunt with scripts/run_fuzzers.sh SECONDS; a finding
# joins fuzz/corpus/ with its fix, and from then on CI replays it.
# run_fuzzers.sh installs clang-16 (Debian) when no clang++-16..19 exists.
stage_fuzz() {
  FUZZ_RUNS=$FUZZ_RUNS JOBS=$JOBS ./scripts/run_fuzzers.sh
}

# Python-level coverage only (atheris instruments our Python modules): with a fixed
# hash seed and input seed it explores the same inputs every run.
stage_pyfuzz() {
  local tmp rc
  tmp=$(mktemp -d)
  (cd "$tmp" && PYTHONHASHSEED=0 "$PY" "$ROOT/fuzz/py_session_fuzzer.py" -runs=2000 -seed=1 \
    -print_final_stats=1 >"$LOGS/pyfuzz.log" 2>&1)
  rc=$?
  tail -n 4 "$LOGS/pyfuzz.log"
  rm -rf "$tmp"
  [ $rc -eq 0 ] || return $rc
  # The server request fuzzer's committed corpus and 300 fixed-seed cases, replayed
  # against a live server on 127.0.0.1 (fuzz/server_request_fuzzer.py explores).
  PYTHONHASHSEED=0 "$PY" "$ROOT/fuzz/replay_server_corpus.py"
}

# --- the run ---------------------------------------------------------------------
echo "test.sh: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(git rev-parse --short HEAD 2>/dev/null || echo "no git"),"\
  "$(nproc) cores, JOBS=$JOBS, PYTHON=$PY"

run_stage apt stage_apt
run_stage build stage_build

if ok build; then
  BUILD_DIR=$(ls -d build/cp3*/ 2>/dev/null | head -n 1)
  if [ -n "$BUILD_DIR" ]; then
    TITLE[ctest]+=" in $BUILD_DIR"
    run_stage ctest stage_ctest
  else
    skip_stage ctest "pip built no build/cp3*/ folder"
  fi
else
  skip_stage ctest "the build stage failed"
fi

if ok apt; then
  run_stage asan-build stage_asan_build
else
  skip_stage asan-build "the system packages it needs are missing (apt stage)"
fi
if ok asan-build; then
  run_stage asan-ctest stage_asan_ctest
else
  skip_stage asan-ctest "the ASan build did not pass"
fi

if ok build; then
  run_stage pytest stage_pytest
else
  skip_stage pytest "the build stage failed"
fi

run_stage fuzz stage_fuzz

if ! ok build; then
  skip_stage pyfuzz "the build stage failed"
elif ! "$PY" -c "import atheris" >/dev/null 2>&1; then
  # The test extra installs atheris on Linux x86-64 only (it has no wheels elsewhere).
  if [ "$(uname -s -m)" = "Linux x86_64" ]; then
    skip_stage pyfuzz "atheris is missing for $PY although the test extra installs it here"
  else
    skip_stage pyfuzz "atheris (the test extra) exists on Linux x86-64 only" skipped
  fi
else
  run_stage pyfuzz stage_pyfuzz
fi
# summary() (the EXIT trap) prints the last line and sets the exit status.
