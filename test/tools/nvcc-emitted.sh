#!/usr/bin/env bash
# The CUDA C++ that `attnc compile --emit cuda` writes for SPEC (forward and backward) compiles
# with nvcc for TARGET, with every warning an error: the templates and the generated units are
# plain CUDA C++17, not only what NVRTC (-default-device) accepts.
#   test/tools/nvcc-emitted.sh ATTNC SPEC TARGET TEMPLATES
# Skipped (exit 77) without nvcc (CUDA_HOME/bin, then PATH).
set -euo pipefail
[[ $# -eq 4 ]] || { echo "usage: $0 ATTNC SPEC TARGET TEMPLATES" >&2; exit 2; }
attnc=$1 spec=$2 target=$3 templates=$4
nvcc="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"
[[ -x $nvcc ]] || nvcc=$(command -v nvcc || true)
if [[ -z $nvcc ]]; then
  echo "nvcc-emitted: no nvcc (CUDA_HOME/bin or PATH): skipped"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$attnc" compile "$spec" --target "$target" --backward --emit cuda -o "$work/unit.cu"
"$nvcc" -std=c++17 -arch="$target" -cubin -Werror all-warnings -I "$templates" \
  -o "$work/unit.cubin" "$work/unit.cu"
echo "nvcc-emitted: $(basename "$spec") $target: compiled"
