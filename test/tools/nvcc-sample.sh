#!/usr/bin/env bash
# A hand-written sample TU of the templates (test/templates/common/*.cu) compiles with nvcc for
# TARGET, every warning an error: headers that nothing emitted instantiates yet stay plain CUDA
# C++17 on the device, not only something NVRTC parses.
#   test/tools/nvcc-sample.sh SAMPLE TARGET TEMPLATES
# Skipped (exit 77) without nvcc (CUDA_HOME/bin, then PATH).
set -euo pipefail
[[ $# -eq 3 ]] || { echo "usage: $0 SAMPLE TARGET TEMPLATES" >&2; exit 2; }
sample=$1 target=$2 templates=$3
nvcc="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"
[[ -x $nvcc ]] || nvcc=$(command -v nvcc || true)
if [[ -z $nvcc ]]; then
  echo "nvcc-sample: no nvcc (CUDA_HOME/bin or PATH): skipped"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$nvcc" -std=c++17 -arch="$target" -cubin -Werror all-warnings -I "$templates" \
  -o "$work/sample.cubin" "$sample"
echo "nvcc-sample: $(basename "$sample") $target: compiled"
