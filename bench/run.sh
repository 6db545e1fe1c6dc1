#!/usr/bin/env bash
# The forward benchmark (needs a CUDA GPU, torch and libattnc.so: $ATTNC_LIB or .device/bundle/).
#   bash bench/run.sh [--quick] [--md docs/perf/H200.md] [--png docs/perf/H200-forward.png]
set -euo pipefail
cd "$(dirname "$0")/.."
export ATTNC_CACHE_DIR=${ATTNC_CACHE_DIR:-/tmp/attnc-cache}
exec python3 bench/bench_forward.py "$@"
