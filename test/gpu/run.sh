#!/usr/bin/env bash
# The GPU test suite: the device tanh forms' errors, then the forward suite (needs a CUDA GPU, torch and libattnc.so: $ATTNC_LIB or .device/bundle/).
#   bash test/gpu/run.sh [--subset small] [--results results/gpu/forward-sm90.md]
set -euo pipefail
cd "$(dirname "$0")/../.."
export ATTNC_CACHE_DIR=${ATTNC_CACHE_DIR:-/tmp/attnc-cache}
python3 test/gpu/tanh_error.py  # the device tanh forms within the bounds docs/spec.md states
exec python3 test/gpu/test_forward.py "$@"
