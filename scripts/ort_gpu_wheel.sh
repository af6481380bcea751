#!/usr/bin/env bash
# ONNX Runtime's CUDA provider on the GPU machine (../shared/GPU.md): the machine
# reaches no network and a device call carries at most 64 MiB, so the 255 MB
# onnxruntime-gpu wheel travels in five parts.
#
#   here:  scripts/ort_gpu_wheel.sh split          download the wheel, split it into .ort1 .. .ort5
#   there: scripts/ort_gpu_wheel.sh stash N        (device call carrying .ortN) copy part N to /tmp/ort
#   there: scripts/ort_gpu_wheel.sh install        join the parts, check the digest, install to /tmp/site
#   there: eval "$(scripts/ort_gpu_wheel.sh env)"  PYTHONPATH/LD_LIBRARY_PATH for the CUDA provider
#
# The five stash calls and the install must follow each other while the machine stays
# warm (files under /tmp survive only then); .ort1 .. .ort5 are git-ignored (carry them).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=1.31.1
case "${1:-}" in
  split)
    tmp=$(mktemp -d)
    pip download --no-deps --only-binary=:all: --python-version 3.12 \
      --platform manylinux_2_28_x86_64 "onnxruntime-gpu==$VERSION" -d "$tmp" >/dev/null
    whl=$(ls "$tmp"/*.whl)
    sha256sum "$whl" | cut -d' ' -f1 > "$tmp/sha256"
    (cd "$tmp" && split -b 52M -d -a 1 "$(basename "$whl")" part.)
    for i in 1 2 3 4 5; do
      rm -rf ".ort$i"; mkdir ".ort$i"
      [ -f "$tmp/part.$((i - 1))" ] && mv "$tmp/part.$((i - 1))" ".ort$i/"
      cp "$tmp/sha256" ".ort$i/"; basename "$whl" > ".ort$i/name"
      grep -qx "/.ort$i/" .git/info/exclude 2>/dev/null || echo "/.ort$i/" >> .git/info/exclude
    done
    rm -rf "$tmp"; du -sh .ort?
    ;;
  stash)
    mkdir -p /tmp/ort; cp ".ort$2"/* /tmp/ort/; ls -la /tmp/ort | tail -n +2
    ;;
  install)
    name=$(cat /tmp/ort/name)
    cat /tmp/ort/part.? > "/tmp/ort/$name"
    echo "$(cat /tmp/ort/sha256)  /tmp/ort/$name" | sha256sum -c -
    pip install --no-index --no-deps --target /tmp/site "/tmp/ort/$name" >/dev/null
    echo "installed $name into /tmp/site"
    ;;
  env)
    echo "export PYTHONPATH=/tmp/site\${PYTHONPATH:+:\$PYTHONPATH} LD_LIBRARY_PATH=/usr/local/cuda/lib64\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    ;;
  *) echo "usage: $0 split | stash N | install | env"; exit 2 ;;
esac
