#!/usr/bin/env bash
# The forward benchmark (needs a CUDA GPU, torch and libattnc.so: $ATTNC_LIB or .device/bundle/).
#   bash bench/run.sh [--quick] [--json forward.json] [--png forward.png]
# docs/perf/forward.md is rendered from the JSON: python3 bench/perf_page.py FILE.json -o PAGE.md
set -euo pipefail
cd "$(dirname "$0")/.."
export ATTNC_CACHE_DIR=${ATTNC_CACHE_DIR:-/tmp/attnc-cache}
exec python3 bench/bench_forward.py "$@"
