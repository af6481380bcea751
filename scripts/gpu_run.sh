#!/usr/bin/env bash
# The cheap GPU loop: build every library that does not depend on Python here (same
# nvcc 13.0, same x86-64) and carry it to the GPU machine packed; build only _core
# there, for that machine's Python, and only when the bindings changed; run a chosen
# set of GPU tests and benchmarks; bring everything back in one archive.
#
#   scripts/gpu_run.sh pack [BUILD]
#       (development machine) builds BUILD (default build/gpu; sm_90 + sm_90a, Release,
#       C++ tests), packs its libraries, the C++ GPU suite and the libraries they link
#       that the GPU machine lacks into .carry/gpu-build.tgz. Incremental: after the
#       first build only what changed compiles. .carry/ is git-ignored; name `.carry`
#       in the device tool's `carry`.
#   scripts/gpu_run.sh remote STAGE...
#       (GPU machine) unpacks to /tmp/xrt-gpu-build, builds _core there unless
#       .carry/_core.<python tag>.so matches the bindings' hash (then copies it; a new
#       one goes to $OUT to be kept in .carry/), then runs each STAGE in order:
#         ctest                 the C++ GPU suites (xrt_gpu_tests; GTEST_FILTER picks tests)
#         pytest:FILE[,FILE][@K]  pytest -m gpu on those files (or "pytest:all"), with
#                               -k K when given ('+' for spaces: @not+torch_compile)
#         bench:SCRIPT[+ARG...]  python3 benchmarks/SCRIPT.py ARG... ('+' separates the
#                               arguments; results under benchmarks/results/)
#         sanitize              compute-sanitizer: memcheck over the C++ GPU suite,
#                               racecheck + synccheck over our kernels' suites, memcheck
#                               over the zoo through the native CUDA engine, racecheck
#                               + synccheck over its transformers (each run
#                               bounded by SANITIZE_TIMEOUT s, default 150; memcheck
#                               by SANITIZE_MEMCHECK_TIMEOUT; SANITIZE_TOOLS picks the C++
#                               suites' tools, SANITIZE_ZOO=0 skips the zoo)
#         sanitize-py           memcheck + racecheck over the GPU suites of our kernels
#                               that only the PyTorch path runs (our kernels only)
#         ort                   ONNX Runtime's CUDA provider for the benchmarks that
#                               compare with it: joins the parts of ort.tar.xz (see
#                               below) from /tmp/ort-parts and .carry/ort/, checks its
#                               sha256, unpacks it to /tmp/site and puts that first on
#                               PYTHONPATH for the later stages (kept while the machine
#                               stays warm: a second call only re-exports it)
#
#   ONNX Runtime's GPU wheel (255 MB) is larger than one call may carry next to the
#   tree, so it travels as an xz tarball in parts over several calls to a warm machine:
#       scripts/gpu_run.sh ort-pack WHEEL   (here: .carry/ort/ort.tar.xz.part-* + .sha256)
#   then one call per part, carrying only that part, runs
#       mkdir -p /tmp/ort-parts && cp .carry/ort/* /tmp/ort-parts/
#   and the call that benchmarks names the last part in carry and runs the stage `ort`.
#       and packs logs and results into $OUT/results.tgz. Prints a table of stage,
#       seconds and status last. PYTEST_TIMEOUT / BENCH_TIMEOUT (s) bound each stage.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODE=${1:-}
[ $# -gt 0 ] && shift
BINDINGS_HASH=$(cat cpp/src/bindings/*.cpp cpp/src/bindings/*.h cpp/include/xpuruntime/*.h \
  cpp/include/xpuruntime/*/*.h 2>/dev/null | sha256sum | cut -c1-16)

pack() {
  # BUILD (default build/gpu): a CMake build of this tree with CUDA (sm_90) and the C++
  # tests; configured here when it does not exist yet, with the system compiler (the
  # GPU machine has the same libstdc++ ABI). The libraries it links that the GPU
  # machine's image lacks (Debian's OpenBLAS, oneDNN, GoogleTest and their runtimes)
  # travel in lib/ too; nothing else is copied.
  local B=${1:-build/gpu}
  if [ ! -f "$B/build.ninja" ]; then
    local launcher=()
    command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
    cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXRT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DXRT_BUILD_TESTS=ON -DCMAKE_C_COMPILER=/usr/bin/gcc -DCMAKE_CXX_COMPILER=/usr/bin/g++ \
      -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ "${launcher[@]}" >/dev/null || exit 1
  fi
  local t0=$SECONDS
  # Every library the GPU suites load (NCCL's helper and the torch allocator where this
  # configuration builds them), and the C++ GPU suite.
  local targets=(xpuruntime_core xpuruntime_cuda xrt_gpu_tests)
  for t in xpuruntime_nccl xpuruntime_torch_allocator; do
    ninja -C "$B" -t query "$t" >/dev/null 2>&1 && targets+=("$t")
  done
  ninja -C "$B" -j "${JOBS:-$(nproc)}" "${targets[@]}" || exit 1
  local stage
  stage=$(mktemp -d)
  mkdir -p "$stage/lib" "$stage/bin"
  cp -a "$B"/lib/libxpuruntime_*.so "$stage/lib/"
  cp -a "$B/bin/xrt_gpu_tests" "$stage/bin/"
  # Non-image dependencies, resolved on this machine.
  ldd "$B"/lib/libxpuruntime_*.so "$B/bin/xrt_gpu_tests" | awk '/=> \//{print $3}' | sort -u |
    grep -E 'lib(openblas|dnnl|gfortran|quadmath|gtest|gmock)' | xargs -r -I{} cp -L {} "$stage/lib/"
  mkdir -p .carry
  tar czf .carry/gpu-build.tgz -C "$stage" lib bin
  rm -rf "$stage"
  echo "$BINDINGS_HASH" > .carry/bindings.hash
  echo "packed .carry/gpu-build.tgz ($(du -h .carry/gpu-build.tgz | cut -f1), build $((SECONDS - t0)) s)"
}

ort_pack() {  # WHEEL: unpacked, the TensorRT provider left out, xz'd, split for carrying
  local wheel=$1 tmp
  [ -f "$wheel" ] || { echo "ort-pack: no wheel '$wheel'"; exit 2; }
  tmp=$(mktemp -d)
  python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$wheel" "$tmp" || exit 1
  rm -f "$tmp"/onnxruntime/capi/libonnxruntime_providers_tensorrt.so
  rm -rf .carry/ort && mkdir -p .carry/ort
  (cd "$tmp" && tar cf - onnxruntime ./*.dist-info) | xz -T0 -9e >.carry/ort/ort.tar.xz || exit 1
  (cd .carry/ort && sha256sum ort.tar.xz >ort.tar.xz.sha256 && split -n 4 -d ort.tar.xz ort.tar.xz.part- &&
    rm ort.tar.xz)
  rm -rf "$tmp"
  ls -la .carry/ort
}

install_ort() {
  local dir=/tmp/ort-parts
  if [ ! -f /tmp/site/onnxruntime/__init__.py ]; then
    mkdir -p "$dir" && cp .carry/ort/* "$dir"/ 2>/dev/null
    cat "$dir"/ort.tar.xz.part-* >/tmp/ort.tar.xz || return 1
    (cd /tmp && sha256sum -c "$dir/ort.tar.xz.sha256") || { ls -la "$dir"; return 1; }
    mkdir -p /tmp/site
    python3 -c "import tarfile; tarfile.open('/tmp/ort.tar.xz').extractall('/tmp/site')" || return 1
  fi
  export PYTHONPATH=/tmp/site:$PYTHONPATH
  python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
}

stage_table=()
run_stage() {  # name, command...
  local name=$1
  shift
  local t0=$SECONDS
  "$@"
  local rc=$?
  stage_table+=("$(printf '%-48s %5d s  rc=%d' "$name" $((SECONDS - t0)) $rc)")
  return $rc
}

build_core_there() {
  local py_tag
  py_tag=$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
  local cached=.carry/_core$py_tag
  if [ -f "$cached" ] && [ "$(cat .carry/_core.hash 2>/dev/null)" = "$BINDINGS_HASH" ]; then
    cp "$cached" "$B/lib/"
    echo "_core: reused $cached (bindings $BINDINGS_HASH)"
    return 0
  fi
  cmake -S . -B /tmp/xrt-core-py -G Ninja -DCMAKE_BUILD_TYPE=Release -DXRT_CUDA=OFF -DXRT_BLAS=OFF \
    -DXRT_ONEDNN=OFF -DXRT_PREBUILT_LIB_DIR="$B/lib" -DPython_EXECUTABLE="$(command -v python3)" \
    -DCMAKE_C_COMPILER=/usr/bin/gcc -DCMAKE_CXX_COMPILER=/usr/bin/g++ >"$OUT/core_build.log" 2>&1 &&
    ninja -C /tmp/xrt-core-py -j16 _core >>"$OUT/core_build.log" 2>&1 || {
    tail -30 "$OUT/core_build.log"
    return 1
  }
  cp /tmp/xrt-core-py/lib/_core*.so "$B/lib/"
  cp /tmp/xrt-core-py/lib/_core*.so "$OUT/"
  echo "$BINDINGS_HASH" >"$OUT/_core.hash"
  echo "_core: built for $(python3 --version) (bindings $BINDINGS_HASH); keep $OUT/_core$py_tag in .carry/"
}

remote() {
  OUT=${OUT:-$ROOT/gpu-out}
  mkdir -p "$OUT"
  B=/tmp/xrt-gpu-build
  export PYTHONUNBUFFERED=1
  rm -rf "$B" && mkdir -p "$B" && tar xzf .carry/gpu-build.tgz -C "$B" || exit 1
  [ "$(cat .carry/bindings.hash 2>/dev/null)" = "$BINDINGS_HASH" ] ||
    echo "warning: .carry/gpu-build.tgz was packed from other headers than this tree's"
  run_stage "_core for $(python3 --version 2>&1)" build_core_there || exit 1
  export XRT_BUILD_DIR=$B PYTHONPATH=$ROOT/python LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  # cuDNN: torch brings a newer one than the system's; load torch's first everywhere.
  python3 -c "import torch, xpuruntime as x; print(torch.cuda.get_device_name(), x.get_all_devices())" || exit 1
  LOGS=$(mktemp -d)
  local rc=0
  for st in "$@"; do
    case "$st" in
      ctest)
        run_stage "ctest (xrt_gpu_tests)" bash -c "$B/bin/xrt_gpu_tests --gtest_brief=1 ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} >$LOGS/ctest_gpu.log 2>&1"
        rc=$((rc | $?)); tail -3 "$LOGS/ctest_gpu.log" ;;
      pytest:*)
        local files=${st#pytest:} kexpr=""
        if [[ "$files" == *@* ]]; then kexpr=${files#*@}; files=${files%%@*}; fi
        [ "$files" = all ] && files="tests/gpu tests/python"
        local kopt=""
        [ -n "$kexpr" ] && kopt="-k $(printf '%q' "${kexpr//+/ }")"
        run_stage "$st" bash -c "timeout ${PYTEST_TIMEOUT:-540} python3 -m pytest -q -ra -p no:cacheprovider -m gpu ${files//,/ } $kopt >$LOGS/pytest_${#stage_table[@]}.log 2>&1"
        rc=$((rc | $?)); tail -15 "$LOGS/pytest_$((${#stage_table[@]} - 1)).log" ;;
      bench:*)
        local spec=${st#bench:} script args
        script=${spec%%+*}
        args=""
        [ "$spec" != "$script" ] && args=${spec#*+}
        run_stage "$st" bash -c "timeout ${BENCH_TIMEOUT:-560} python3 benchmarks/$script.py ${args//+/ } >$LOGS/$script.log 2>&1"
        rc=$((rc | $?)); tail -40 "$LOGS/$script.log" ;;
      sanitize)
        # compute-sanitizer over our CUDA kernels: memcheck over the whole C++ GPU suite,
        # racecheck and synccheck over the suites of the kernels we wrote (shared memory,
        # barriers), memcheck over one fp32 and one fp16 run of each zoo model through the
        # native CUDA engine (exported outside the sanitizer). Each run is bounded by
        # SANITIZE_TIMEOUT seconds; a run cut by it reports rc=124 (its log holds what was
        # checked until then).
        local cs st_t=${SANITIZE_TIMEOUT:-150} ours='CudaOp*:CudaFused*:CudaProvider*'
        cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
        # The suites' negative tests make CUDA API calls fail on purpose (an allocation
        # above the device's memory, timing events created without timing, a sync while
        # capturing); memcheck would report each as an error, so API errors are not
        # reported: what it checks is device memory access, leaks and races.
        for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
          local filter='*' extra='' t=$st_t
          [ "$tool" != memcheck ] && filter=$ours
          [ "$tool" = memcheck ] && { extra='--report-api-errors no'; t=${SANITIZE_MEMCHECK_TIMEOUT:-$st_t}; }
          run_stage "$tool xrt_gpu_tests ($filter)" bash -c "timeout $t $cs --tool $tool $extra --error-exitcode 9 \
            --log-file $LOGS/sanitize_${tool}.log $B/bin/xrt_gpu_tests --gtest_filter='$filter' --gtest_brief=1 \
            >$LOGS/sanitize_${tool}.out 2>&1"
          rc=$((rc | $?)); tail -3 "$LOGS/sanitize_${tool}.log"
        done
        [ "${SANITIZE_ZOO:-1}" = 0 ] && continue
        local zoo
        zoo=$(python3 -c "import sys; sys.path.insert(0, 'tests/python'); import model_zoo as z; print(' '.join(str(z.export(n)) for n in z.MODELS))")
        run_stage "memcheck zoo through the native CUDA engine" bash -c "timeout $st_t $cs --tool memcheck \
          --error-exitcode 9 --log-file $LOGS/sanitize_memcheck_zoo.log python3 scripts/sanitize_native_cuda.py $zoo \
          >$LOGS/sanitize_memcheck_zoo.out 2>&1"
        rc=$((rc | $?)); tail -3 "$LOGS/sanitize_memcheck_zoo.log"; tail -12 "$LOGS/sanitize_memcheck_zoo.out"
        # Our attention, softmax, LayerNorm and transpose kernels use shared memory and
        # barriers: racecheck and synccheck over the two transformer models of the zoo.
        local tx
        tx=$(python3 -c "import sys; sys.path.insert(0, 'tests/python'); import model_zoo as z; print(' '.join(str(z.export(n)) for n in ('vit_tiny', 'gpt2_tiny')))")
        for tool in racecheck synccheck; do
          run_stage "$tool zoo transformers (native CUDA)" bash -c "timeout $st_t $cs --tool $tool --error-exitcode 9 \
            --log-file $LOGS/sanitize_${tool}_zoo.log python3 scripts/sanitize_native_cuda.py $tx \
            >$LOGS/sanitize_${tool}_zoo.out 2>&1"
          rc=$((rc | $?)); tail -3 "$LOGS/sanitize_${tool}_zoo.log"
        done ;;
      sanitize-py)
        # Our kernels that only the PyTorch path runs (flash_v2 forward and backward,
        # LayerNorm forward and backward, column sums, the skinny GEMM) through their
        # GPU suites; only kernels whose name holds "xpuruntime" are checked (torch's
        # own run unchecked, at near full speed). Bounded by SANITIZE_TIMEOUT each.
        # racecheck hits an internal sanitizer error in cuBLASLt's Hopper kernels (a
        # routed linear) and in our sm_90a flash kernels (wgmma/TMA): SANITIZE_PY_K passes
        # pytest a -k expression to leave the cuBLAS ones out, and XRT_FLASH_PORTABLE=1 in
        # the environment runs the portable flash kernels, which racecheck can check.
        local cs st_t=${SANITIZE_TIMEOUT:-150}
        local suites=${SANITIZE_PY_SUITES:-"tests/gpu/test_layernorm_gpu.py tests/gpu/test_column_sums_gpu.py tests/gpu/test_skinny_gemm_gpu.py tests/gpu/test_attention_gpu.py"}
        cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
        for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
          local extra=''
          [ "$tool" = memcheck ] && extra='--report-api-errors no'
          run_stage "$tool PyTorch-path kernels (pytest)" bash -c "timeout $st_t $cs --tool $tool $extra \
            --kernel-name kns=xpuruntime --error-exitcode 9 --log-file $LOGS/sanitize_${tool}_py.log \
            python3 -m pytest -q -p no:cacheprovider -m gpu $suites ${SANITIZE_PY_K:+-k \"$SANITIZE_PY_K\"} \
            >$LOGS/sanitize_${tool}_py.out 2>&1"
          rc=$((rc | $?)); tail -3 "$LOGS/sanitize_${tool}_py.log"; tail -2 "$LOGS/sanitize_${tool}_py.out"
        done ;;
      ort)
        run_stage "onnxruntime-gpu (carried parts)" install_ort
        rc=$((rc | $?)) ;;
      *) echo "unknown stage '$st'"; rc=1 ;;
    esac
  done
  cp -r "$LOGS" benchmarks/results/logs
  tar czf "$OUT/results.tgz" benchmarks/results
  rm -rf benchmarks/results/logs
  echo "== stages (GPU-machine seconds)"
  printf '%s\n' "${stage_table[@]}"
  return $rc
}

case "$MODE" in
  pack) pack "$@" ;;
  ort-pack) ort_pack "$@" ;;
  remote) remote "$@" ;;
  *) sed -n 2,35p "$0"; exit 2 ;;
esac
