#!/usr/bin/env bash
# Breaking the score derivative must make the GPU backward suite fail. Runs the softcap cases of
# test/gpu/test_backward.py with the library dev/mutant-bundle.sh builds (d tanh = 1 - tanh)
# and a fresh kernel cache; exits 0 only if those cases fail on their gradients.
#   bash test/gpu/mutation.sh [MUTANT_LIB]   (default .device/mutant/libattnc.so)
set -uo pipefail
cd "$(dirname "$0")/../.."
lib=${1:-.device/mutant/libattnc.so}
[[ -f $lib ]] || { echo "mutation: no $lib (run dev/mutant-bundle.sh)" >&2; exit 2; }
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
log=$(ATTNC_CACHE_DIR=$cache python3 test/gpu/test_backward.py --lib "$lib" --only softcap 2>&1)
status=$?
echo "$log" | tail -n 8
summary=$(grep -E '^[0-9]+/[0-9]+ passed, [0-9]+ failed' <<<"$log" | tail -n1)
failed=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$summary")
if [[ $status -ne 0 && -n $summary && $failed -gt 0 ]]; then
  echo "mutation: OK, the broken tanh derivative fails the suite ($summary)"
  exit 0
fi
echo "mutation: FAILED, the suite did not catch the broken derivative (status $status, '${summary:-no summary}')" >&2
exit 1
