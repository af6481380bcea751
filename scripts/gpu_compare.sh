#!/usr/bin/env bash
# The GPU machine's before/after comparison for a change that must not cost speed:
# builds a baseline tree and this tree (sm_90), then runs the GPU benchmarks on each,
# alternating bench by bench, and compares the figures (benchmarks/compare_builds.py).
#
# Usage: scripts/gpu_compare.sh build BASE_SRC      build both trees (reused while the machine is warm)
#        scripts/gpu_compare.sh round N BASE_SRC    one round: each benchmark on base, then on head
#        scripts/gpu_compare.sh hostrounds N BASE_SRC   N pinned rounds of LayerNorm host us per call
#        scripts/gpu_compare.sh report              compare every round so far -> $OUT
#        scripts/gpu_compare.sh prebuilt            (no build there) unpack the two builds packed on the
#                                                   development machine by `abpack BASE_REV HEAD_REV`
#                                                   into .carry/ab/ and build only _core for each
#        scripts/gpu_compare.sh nativeround N MODELS   one round of bench_native_cuda.py (MODELS comma-
#                                                   separated, no torch.compile column) on base, then head,
#                                                   each with its own commit's benchmark code
#        scripts/gpu_compare.sh abpack BASE_REV HEAD_REV BASE_LIB HEAD_LIB   (development machine)
#                                                   pack two commits' sources and library folders
# BASE_SRC is a source tree of the baseline commit (e.g. `git archive REV | tar -x -C .base`).
# BENCHES (default: the three below) picks the benchmarks of a round; NAME (default
# seam_compare) names the results file.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
HEAD_B=${XRT_GPU_BUILD:-/tmp/xrt-gpu-build}
BASE_B=/tmp/xrt-base-build
CMP=/tmp/xrt-compare
export PYTHONUNBUFFERED=1
CC_ARGS=()
[ -x /usr/bin/g++ ] && CC_ARGS=(-DCMAKE_C_COMPILER=/usr/bin/gcc -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++)

configure_and_build() {  # src build log
  if [ ! -f "$2/build.ninja" ]; then
    cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXRT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DXRT_BUILD_TESTS=ON -DPython_EXECUTABLE="$(command -v python3)" "${CC_ARGS[@]}" > "$3" 2>&1 || return 1
  fi
  ninja -C "$2" -j8 >> "$3" 2>&1
}

bench() {  # src build outdir
  mkdir -p "$3"
  for b in bench_attention bench_layernorm bench_gpt2_step; do
    (cd "$1" && XRT_BUILD_DIR="$2" PYTHONPATH="$1/python" timeout 240 python3 "benchmarks/$b.py" --out "$3") \
      > "$3/$b.log" 2>&1
    echo "$(basename "$3") $b rc=$?"
  done
}

case "${1:-}" in
  build)
    BASE_SRC=$(cd "$2" && pwd)
    configure_and_build "$BASE_SRC" "$BASE_B" "$OUT/build_base.log" & pb=$!
    configure_and_build "$PWD" "$HEAD_B" "$OUT/build_head.log" & ph=$!
    wait $pb; rb=$?; wait $ph; rh=$?
    echo "build base rc=$rb head rc=$rh"
    [ $rb -eq 0 ] && [ $rh -eq 0 ] || { tail -20 "$OUT"/build_*.log; exit 1; }
    ;;
  round)
    BASE_SRC=$(cd "$3" && pwd)
    # Alternate per benchmark so drifting clocks or host load hit both builds alike.
    for b in ${BENCHES:-bench_attention bench_layernorm bench_gpt2_step}; do
      for who in base head; do
        src=$PWD; bld=$HEAD_B
        [ $who = base ] && { src=$BASE_SRC; bld=$BASE_B; }
        d="$CMP/${who}_$2"; mkdir -p "$d"
        (cd "$src" && XRT_BUILD_DIR="$bld" PYTHONPATH="$src/python" timeout 240 python3 "benchmarks/$b.py" --out "$d") \
          > "$d/$b.log" 2>&1
        echo "round $2 $who $b rc=$? $(grep -m1 -E 'speedup|ratios|wrote' "$d/$b.log" | cut -c1-80)"
      done
    done
    ;;
  hostrounds)
    # LayerNorm host microseconds per call: this tree's bench_layernorm.py --host-only
    # (the same harness for both builds) against each build, alternating, pinned to one
    # core so that both builds' processes see the same CPU (unpinned, processes of one
    # build differ by up to 60%).
    BASE_SRC=$(cd "$3" && pwd); HEAD_SRC=$PWD
    for r in $(seq 1 "$2"); do
      for who in base head; do
        src=$PWD; bld=$HEAD_B
        [ $who = base ] && { src=$BASE_SRC; bld=$BASE_B; }
        d="$CMP/${who}_h$r"; mkdir -p "$d"
        (cd "$src" && XRT_BUILD_DIR="$bld" PYTHONPATH="$src/python" timeout 120 taskset -c 3 python3 \
          "$HEAD_SRC/benchmarks/bench_layernorm.py" --host-only --out "$d") > "$d/host.log" 2>&1
        echo "host round $r $who rc=$?"
      done
    done
    ;;
  abpack)
    # Sources from git, libraries from two build folders of those commits (lib/ with
    # libxpuruntime_*.so), plus the non-image libraries they link (as gpu_run.sh pack).
    mkdir -p .carry/ab && rm -f .carry/ab/*
    for who in base head; do
      rev=$2; lib=$4
      [ $who = head ] && { rev=$3; lib=$5; }
      git archive "$rev" | gzip > ".carry/ab/$who-src.tgz"
      echo "$rev" > ".carry/ab/$who.rev"
      tar czf ".carry/ab/$who-lib.tgz" -C "$lib" $(cd "$lib" && ls libxpuruntime_*.so)
    done
    # The libraries both link that the GPU machine's image lacks, packed once.
    stage=$(mktemp -d)
    ldd "$4"/libxpuruntime_*.so "$5"/libxpuruntime_*.so | awk '/=> \//{print $3}' | sort -u |
      grep -E 'lib(openblas|dnnl|gfortran|quadmath)' | xargs -r -I{} cp -L {} "$stage/"
    tar czf .carry/ab/deps-lib.tgz -C "$stage" .
    rm -rf "$stage"
    du -ch .carry/ab/* | tail -1
    ;;
  prebuilt)
    for who in base head; do
      (
        bld=$HEAD_B; [ $who = base ] && bld=$BASE_B
        src=/tmp/xrt-ab-src/$who
        rm -rf "$bld" "$src" && mkdir -p "$bld/lib" "$src"
        tar xzf ".carry/ab/$who-lib.tgz" -C "$bld/lib" && tar xzf .carry/ab/deps-lib.tgz -C "$bld/lib" &&
          tar xzf ".carry/ab/$who-src.tgz" -C "$src" || exit 1
        cmake -S "$src" -B "/tmp/xrt-core-$who" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXRT_CUDA=OFF -DXRT_BLAS=OFF \
          -DXRT_ONEDNN=OFF -DXRT_PREBUILT_LIB_DIR="$bld/lib" -DPython_EXECUTABLE="$(command -v python3)" \
          "${CC_ARGS[@]}" > "$OUT/core_$who.log" 2>&1 && ninja -C "/tmp/xrt-core-$who" -j8 _core >> "$OUT/core_$who.log" 2>&1 &&
          cp /tmp/xrt-core-$who/lib/_core*.so "$bld/lib/"
        echo "_core $who ($(cat .carry/ab/$who.rev)) rc=$?"
      ) &
    done
    wait
    ;;
  nativeround)
    # Each build with its own commit's benchmark code; base first, then head, per model.
    for m in ${3//,/ }; do
      for who in base head; do
        bld=$HEAD_B; [ $who = base ] && bld=$BASE_B
        src=/tmp/xrt-ab-src/$who
        d="$CMP/${who}_$2"; mkdir -p "$d"
        (cd "$src" && XRT_BUILD_DIR="$bld" PYTHONPATH="$src/python" LD_LIBRARY_PATH="$bld/lib:${LD_LIBRARY_PATH:-}" \
          timeout 240 python3 benchmarks/bench_native_cuda.py --models "$m" --no-compile \
          --out "$d/native_cuda_$m.json") > "$d/native_cuda_$m.log" 2>&1
        echo "round $2 $who $m rc=$? $(grep -m1 -E "^ *$m" "$d/native_cuda_$m.log" | cut -c1-100)"
      done
    done
    ;;
  report)
    dev=$(python3 -c "import torch; print(torch.cuda.get_device_name().replace(' ', '_'))")
    bases=$(ls -d $CMP/base_* | paste -sd,); heads=$(ls -d $CMP/head_* | paste -sd,)
    python3 benchmarks/compare_builds.py --base "$bases" --head "$heads" --tolerance 0.03 \
      --base-rev "${BASE_REV:-}" --head-rev "${HEAD_REV:-}" --out "benchmarks/results/${NAME:-seam_compare}_${dev}.json"
    cp "benchmarks/results/${NAME:-seam_compare}_${dev}.json" "$OUT/"
    tar czf "$OUT/compare_runs.tgz" -C "$CMP" .
    ;;
  *) echo "usage: $0 build BASE_SRC | round N BASE_SRC | abpack ... | prebuilt | nativeround N MODELS | report"; exit 2 ;;
esac
