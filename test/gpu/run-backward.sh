#!/usr/bin/env bash
# The GPU backward suite (needs a CUDA GPU, torch and libattnc.so: $ATTNC_LIB or .device/bundle/).
#   bash test/gpu/run-backward.sh [--subset small] [--results results/gpu/backward-sm90.md]
#                                 [--target sm_80] [--only VARIANT]... [--head-dim N]...
set -euo pipefail
cd "$(dirname "$0")/../.."
export ATTNC_CACHE_DIR=${ATTNC_CACHE_DIR:-/tmp/attnc-cache}
exec python3 test/gpu/test_backward.py "$@"
