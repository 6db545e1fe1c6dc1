#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck over the small subsets of the forward and backward suites
# and the decode suite's --sanitize cases (bad device values among them), attnc's kernels
# only (the suite names its specs attnctest_*); fails on any error or hazard.
#   bash test/gpu/sanitize.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export ATTNC_CACHE_DIR=${ATTNC_CACHE_DIR:-/tmp/attnc-cache}
for tool in memcheck racecheck; do
  echo "== compute-sanitizer --tool $tool"
  compute-sanitizer --tool "$tool" --kernel-name kns=attnctest_ --error-exitcode 1 \
    python3 test/gpu/test_forward.py --subset small | tail -n 3
done
for tool in memcheck racecheck; do
  echo "== compute-sanitizer --tool $tool (backward)"
  compute-sanitizer --tool "$tool" --kernel-name kns=attnctest_ --error-exitcode 1 \
    python3 test/gpu/test_backward.py --subset small | tail -n 3
done
for tool in memcheck racecheck; do
  echo "== compute-sanitizer --tool $tool (decode, paged, varlen; bad device values)"
  compute-sanitizer --tool "$tool" --kernel-name kns=attnctest_ --error-exitcode 1 \
    python3 test/gpu/test_decode.py --sanitize | tail -n 3
done
