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
