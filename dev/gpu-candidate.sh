#!/usr/bin/env bash
# On the GPU machine, in one call: what a candidate build must pass before it lands, then its A/B
# against a base build, each step time-bounded, a summary last (device time is scarce: one call,
# no step can hang it). CANDIDATE and BASE are libattnc.so files, normally the candidate's
# .device/bundle/libattnc.so (dev/device-bundle.sh, whose backward kernels the suite also
# uses) and a base library copied into .device/bundleB/.
#   bash dev/gpu-candidate.sh CANDIDATE BASE [--fwd ROW]... [--bwd ROW]... [--out DIR]
#                                 [--no-suites] [--rounds N]
# 1. the forward suite, 2. the backward suite, 3. compute-sanitizer memcheck and racecheck over
# both small subsets, all on CANDIDATE; 4. dev/bench/ab_mix.py over the --fwd rows, 5. its
# --backward over the --bwd rows (BASE first, so the ratios are CANDIDATE / BASE; --rounds
# alternating batches each, 30 unless told). Logs and tables go to DIR ($OUT, else
# /tmp/gpu-candidate).
set -uo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '7,8p' "$0" | sed -e '1s/^#  */usage: /' -e '2s/^#/      /' >&2; exit 2; }
[[ $# -ge 2 ]] || usage
candidate=$1 base=$2
shift 2
fwd=() bwd=() out=${OUT:-/tmp/gpu-candidate} suites=1 rounds=30
while [[ $# -gt 0 ]]; do
  case "$1" in
    --fwd) [[ $# -ge 2 ]] || usage; fwd+=(--only "$2"); shift 2 ;;
    --bwd) [[ $# -ge 2 ]] || usage; bwd+=(--only "$2"); shift 2 ;;
    --out) [[ $# -ge 2 ]] || usage; out=$2; shift 2 ;;
    --rounds) [[ $# -ge 2 ]] || usage; rounds=$2; shift 2 ;;
    --no-suites) suites=0; shift ;;
    *) echo "gpu-candidate: unknown argument '$1'" >&2; usage ;;
  esac
done
for lib in "$candidate" "$base"; do
  [[ -f "$lib" ]] || { echo "gpu-candidate: no such library: $lib" >&2; exit 2; }
done
mkdir -p "$out"
export ATTNC_CACHE_DIR=${ATTNC_CACHE_DIR:-/tmp/attnc-cache}
source dev/gpu-steps.sh  # step(), summary

if [[ $suites == 1 ]]; then
  step "forward suite" 120 "$out/forward.log" \
    python3 test/gpu/test_forward.py --lib "$candidate" --results "$out/forward-sm90.md"
  step "backward suite" 240 "$out/backward.log" \
    python3 test/gpu/test_backward.py --lib "$candidate" --results "$out/backward-sm90.md"
  step "sanitizers" 150 "$out/sanitize.log" \
    env ATTNC_LIB="$(realpath "$candidate")" bash test/gpu/sanitize.sh
  grep -hE "^FAIL" "$out/forward.log" "$out/backward.log" | head -n 8
  grep -E "SUMMARY" "$out/sanitize.log"
fi
if [[ ${#fwd[@]} -gt 0 ]]; then
  # Per row a few seconds of timed batches at 30 rounds, plus each build's compile and warm-up (5
  # rows of 4 builds took 55 s); the limits leave room for that twice over. fwd and bwd hold two
  # words a row (--only ROW).
  step "A/B forward" $((60 + 12 * ${#fwd[@]})) "$out/ab-forward.md" \
    python3 dev/bench/ab_mix.py --lib "$base" --lib "$candidate" --rounds "$rounds" "${fwd[@]}"
  cat "$out/ab-forward.md"
fi
if [[ ${#bwd[@]} -gt 0 ]]; then
  step "A/B backward" $((60 + 15 * ${#bwd[@]})) "$out/ab-backward.md" \
    python3 dev/bench/ab_mix.py --backward --lib "$base" --lib "$candidate" --rounds "$rounds" "${bwd[@]}"
  cat "$out/ab-backward.md"
fi
echo "== gpu-candidate: $candidate against $base"
printf '%s\n' "${summary[@]}"
