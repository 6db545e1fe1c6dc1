#!/usr/bin/env bash
# The backward benchmark (needs a CUDA GPU, torch and libattnc.so: $ATTNC_LIB or .device/bundle/).
#   bash bench/run-backward.sh [--quick] [--json backward.json] [--no-flex]
# docs/perf/backward.md is rendered from the JSON: python3 bench/perf_page.py --backward FILE.json
set -euo pipefail
cd "$(dirname "$0")/.."
export ATTNC_CACHE_DIR=${ATTNC_CACHE_DIR:-/tmp/attnc-cache}
exec python3 bench/bench_backward.py "$@"
