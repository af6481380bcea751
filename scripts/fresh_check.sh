#!/usr/bin/env bash
# Runs the README's two quick-start commands the way a new user would, in a clean
# setting, and times them:
#   1. a fresh `git clone` of this repository (its committed HEAD) into a temporary folder;
#   2. a fresh virtual environment (`python3 -m venv`), activated; a fresh HOME (so no
#      pip cache, pip config, ccache or shell setup of yours), a PATH of the venv and the
#      system folders only, and no PYTHONPATH/XRT_* variables;
#   3. `pip install . && xpuruntime run`;
#   4. `./scripts/test.sh`.
# Before and after, it reports which compilers and Debian packages the project needs
# were present (looked up with `command -v` and `dpkg -s`, not assumed), so the log
# shows what the project installed by itself. The last line summarises every step
# with its wall time; the exit status is 0 only when every step passed.
#
# Usage: scripts/fresh_check.sh [--no-tests]
#   --no-tests   stop after the first README command
# Environment: FRESH_PYTHON (default: python3 on your PATH) the interpreter the venv is
#   made from; FRESH_DIR (default: a new folder under ${TMPDIR:-/tmp}) where it all goes,
#   kept afterwards for inspection; JOBS is passed on to test.sh.
# Passed through unchanged (machine configuration, not user setup): LANG, TERM,
# proxies, certificate bundles, pip's timeout, the CUDA toolkit's location.
#
# It does not remove system packages that are already installed (that would break a
# shared machine): for a proof from nothing, run it in a fresh container or VM.
set -uo pipefail
SRC=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel) || { echo "fresh_check: not in a git repository" >&2; exit 1; }
RUN_TESTS=1
case ${1:-} in
  --no-tests) RUN_TESTS=0 ;;
  "") ;;
  *) echo "fresh_check: unknown argument '$1' (usage: scripts/fresh_check.sh [--no-tests])" >&2; exit 2 ;;
esac
BASE_PY=$(command -v "${FRESH_PYTHON:-python3}") \
  || { echo "fresh_check: no ${FRESH_PYTHON:-python3} on the PATH (set FRESH_PYTHON)" >&2; exit 1; }
BASE_PY=$("$BASE_PY" -c 'import sys; print(sys.executable)')
WORK=${FRESH_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/xrt-fresh.XXXXXX")}
mkdir -p "$WORK/home" "$WORK/logs"
REPO=$WORK/xpuruntime
VENV=$WORK/venv
T0=$SECONDS
STEPS=()
declare -A RES=() DUR=()
CURRENT=""

fmt_time() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
logname() { echo "${1//[^A-Za-z0-9._-]/_}.log"; }

summary() {
  local rc=$? s parts="" failed=0
  trap - EXIT INT TERM
  [ -n "$CURRENT" ] && RES[$CURRENT]="INTERRUPTED"
  for s in "${STEPS[@]}"; do
    [ "${RES[$s]}" = ok ] || failed=1
    parts+="${parts:+ | }$s: ${RES[$s]}${DUR[$s]:+ $(fmt_time "${DUR[$s]}")}"
  done
  [ $rc -ne 0 ] && failed=1
  echo
  local tlog
  tlog=$WORK/logs/$(logname ./scripts/test.sh)
  [ -f "$tlog" ] && echo "test.sh's last line: $(tail -n 1 "$tlog")"
  echo "fresh_check: logs and the clone are in $WORK"
  if [ $failed -eq 0 ]; then
    echo "fresh_check: PASSED in $(fmt_time $((SECONDS - T0))): $parts"
    exit 0
  fi
  echo "fresh_check: FAILED in $(fmt_time $((SECONDS - T0))): $parts"
  exit 1
}
trap summary EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The clean environment every step runs in (env -i: nothing else comes through).
CLEAN_ENV=(env -i "HOME=$WORK/home" "PATH=$VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  "VIRTUAL_ENV=$VENV" "LANG=${LANG:-C.UTF-8}" "TERM=${TERM:-dumb}" "DEBIAN_FRONTEND=noninteractive")
[ -n "${JOBS:-}" ] && CLEAN_ENV+=("JOBS=$JOBS")
while IFS='=' read -r name _; do
  case $name in
    http_proxy | https_proxy | no_proxy | HTTP_PROXY | HTTPS_PROXY | NO_PROXY | SSL_CERT_FILE | SSL_CERT_DIR | \
      REQUESTS_CA_BUNDLE | CURL_CA_BUNDLE | PIP_CERT | GIT_SSL_CAINFO | PIP_DEFAULT_TIMEOUT | CUDA_HOME | \
      CUDA_PATH | LIBRARY_PATH)
      CLEAN_ENV+=("$name=${!name}") ;;
  esac
done < <(env)

# step NAME COMMAND-STRING: runs the command with bash in the clean environment (in the
# clone once it exists), its output shown and kept in logs/NAME.log (NAME made a file
# name), and times it.
step() {
  local name=$1 cmd=$2 start rc dir=$WORK log
  log=$WORK/logs/$(logname "$name")
  STEPS+=("$name")
  [ -d "$REPO" ] && dir=$REPO
  echo
  echo "=== fresh_check [$name]: \$ $cmd   (in $dir, $(date -u +%H:%M:%S) UTC)"
  CURRENT=$name
  start=$SECONDS
  (cd "$dir" && "${CLEAN_ENV[@]}" bash -c "$cmd") 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  DUR[$name]=$((SECONDS - start))
  CURRENT=""
  if [ "$rc" -eq 0 ]; then RES[$name]=ok; else RES[$name]="FAILED(exit $rc)"; fi
  echo "=== fresh_check [$name]: ${RES[$name]} in $(fmt_time "${DUR[$name]}")"
  return "$rc"
}

# What the machine has of the tools and Debian packages the README's commands use.
# Installed by the project itself: test.sh (GoogleTest, OpenBLAS, oneDNN, Ninja) and
# run_fuzzers.sh (clang-16 with libFuzzer). Assumed by the README: a C++ compiler, git,
# Python with venv; CMake and Ninja also come from PyPI for the build.
report_machine() {
  local t p
  echo "--- machine ($1): $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"), $(nproc) cores"
  for t in git c++ g++ cmake ninja nvcc clang++ clang++-16 clang++-17 clang++-18 clang++-19 ccache; do
    p=$(PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin command -v "$t") \
      || p="absent"
    printf '  %-12s %s\n' "$t" "$p"
  done
  if command -v dpkg >/dev/null 2>&1; then
    for p in build-essential libgtest-dev libopenblas-dev libdnnl-dev ninja-build clang-16 libclang-rt-16-dev; do
      if dpkg -s "$p" >/dev/null 2>&1; then
        printf '  %-18s %s\n' "$p" "installed $(dpkg-query -W -f='${Version}' "$p")"
      else
        printf '  %-18s %s\n' "$p" "not installed"
      fi
    done
  else
    echo "  (no dpkg: not Debian; test.sh's apt stage will say what it needs)"
  fi
}

echo "fresh_check: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), source $SRC at $(git -C "$SRC" rev-parse --short HEAD),"\
  "base Python $BASE_PY ($("$BASE_PY" -c 'import sys; print(sys.version.split()[0])')), work in $WORK"
[ -n "$(git -C "$SRC" status --porcelain --untracked-files=no)" ] \
  && echo "fresh_check: note: $SRC has uncommitted changes; the clone has only the committed HEAD"
report_machine "before"

step clone "git clone -q '$SRC' '$REPO' && git -C '$REPO' log -1 --format='%h %s' | cut -c1-100" || exit 1
step venv "'$BASE_PY' -m venv '$VENV' && command -v python3 pip xpuruntime; python3 -m pip --version" || exit 1
step "pip install . && xpuruntime run" "pip install . && xpuruntime run" || exit 1
if [ $RUN_TESTS -eq 1 ]; then
  # test.sh's pip installs into whatever `python3` is: check that it is the venv's.
  step "python3 is the venv's" "test \"\$(command -v python3)\" = '$VENV/bin/python3' && command -v python3" || exit 1
  step ./scripts/test.sh ./scripts/test.sh
fi
echo
report_machine "after"
