#!/usr/bin/env bash
# `make check`: run every ctest test (lit suite, GoogleTest units, example NVRTC compiles) after
# `make build`. Exits non-zero if any test fails or none is found; ctest's summary line is
# repeated as the last line so it is what a CI log ends with.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-2}
log=$build_dir/ctest.log

status=0
ctest --test-dir "$build_dir" --output-on-failure --no-tests=error -j"$jobs" 2>&1 | tee "$log" ||
  status=$?
summary=$(grep -E '^[0-9]+% tests passed' "$log" | tail -1 || true)
echo
echo "${summary:-ctest printed no summary line (status $status)}"
exit $status
