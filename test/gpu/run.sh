#!/usr/bin/env bash
# The GPU test suite (needs a CUDA GPU, torch and libattnc.so: $ATTNC_LIB or .device/bundle/).
#   bash test/gpu/run.sh [--subset small] [--results-md test/gpu/RESULTS.md]
set -euo pipefail
cd "$(dirname "$0")/../.."
export ATTNC_CACHE_DIR=${ATTNC_CACHE_DIR:-/tmp/attnc-cache}
exec python3 test/gpu/test_forward.py "$@"
