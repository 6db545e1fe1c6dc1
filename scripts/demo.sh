#!/usr/bin/env bash
# What `make demo` shows: one example spec, how attnc derives its tiles, and the CUDA it generates.
# Edit here to change the demo; the Makefile only builds and calls this script.
set -euo pipefail
cd "$(dirname "$0")/.."
attnc=${BUILD_DIR:-build}/bin/attnc
spec=examples/causal_hd128.yaml

if [[ ! -x $attnc ]]; then
  echo "demo: $attnc was not built (is compiler/tools/attnc in this tree?)" >&2
  exit 1
fi

run() { echo; echo "\$ $*"; "$@"; }

echo "\$ cat $spec"
cat "$spec"
run "$attnc" explain "$spec" --target sm_90a --seqlen 4096
echo
echo "\$ $attnc compile $spec --target sm_90a --emit cuda | head -60"
# Captured first: with pipefail, head closing the pipe early would fail the demo.
cuda=$("$attnc" compile "$spec" --target sm_90a --emit cuda)
head -60 <<<"$cuda"

# On a machine with a GPU, run the example too: JIT-compile it for that GPU, check it against a
# float64 CPU reference on random data, and time it.
jit=${BUILD_DIR:-build}/bin/jit-host
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  run "$jit" "$spec" --batch 4 --seqlen 1024
else
  echo
  echo "No GPU on this machine: the demo stops at the compiled kernel. On a machine with one it also"
  echo "runs it, checks it against a float64 reference and prints its time and TFLOP/s."
fi
