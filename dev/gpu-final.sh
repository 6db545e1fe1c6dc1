#!/usr/bin/env bash
# On the GPU machine, in one call: the run whose pages are committed (docs/perf/forward.json and
# backward.json, rendered by bench/perf_page.py; results/gpu/*-sm90.md), for the library in .device/bundle/ (or
# $ATTNC_LIB): the forward suite, jit-host's prepared-inputs check (the bundle's, whatever
# $ATTNC_LIB is), the forward bench with its targets, the backward bench, the backward suite, the
# sanitizers and the cold JIT times, each step time-bounded, a summary last.
#   bash dev/gpu-final.sh [--out DIR] [--no-jit] [--benches | --checks]
# Files go to DIR ($OUT, else /tmp/gpu-final): forward.json, forward.png, forward.md,
# backward.json, backward.md, forward-sm90.md, backward-sm90.md, targets.txt, jit.md and each step's log.
# About 590 s with the JIT times (two rounds, about 130 s), near the device's 600 s per-call
# limit; 340-470 s without, so `--no-jit` and bench/jit_time.py --rounds 2 in a second call are
# the safer pair (each bench implementation warms up for 500 ms); the bench rows are the committed
# tables' (N=4K, N=8K, hd128 N=16K). The sanitizers get 150 s: compiling their kernels into an
# empty cache takes more than 45 s. The suites run every head dim (forward about 45 s, backward
# about 175 s), so the whole call is near 600 s even without the JIT times: --benches runs
# the two benches alone (with their targets), --checks the rest (the suites, jit-host, the tanh
# error and the sanitizers), each in its own call on the same bundle.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '7p' "$0" | sed -e 's/^#  */usage: /' >&2; exit 2; }
out=${OUT:-/tmp/gpu-final} jit=1 benches=1 checks=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) [[ $# -ge 2 ]] || usage; out=$2; shift 2 ;;
    --no-jit) jit=0; shift ;;
    --benches) checks=0 jit=0; shift ;;
    --checks) benches=0 jit=0; shift ;;
    *) echo "gpu-final: unknown argument '$1'" >&2; usage ;;
  esac
done
lib=${ATTNC_LIB:-.device/bundle/libattnc.so}
[[ -f "$lib" ]] || { echo "gpu-final: no such library: $lib (dev/device-bundle.sh makes it)" >&2; exit 2; }
export ATTNC_LIB=$(realpath "$lib")
export ATTNC_CACHE_DIR=${ATTNC_CACHE_DIR:-/tmp/attnc-cache}
mkdir -p "$out"
rows=(--only N=4K --only N=8K --only "hd128 full N=16K" --only "hd128 causal N=16K")
source dev/gpu-steps.sh  # step(), summary

echo "== gpu-final: $(cat .device/bundle/COMMIT 2>/dev/null || echo "code ?") $(date -u +%F' '%H:%M) UTC"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"
if [[ $checks == 1 ]]; then
  step "tanh error" 60 "$out/tanh.log" python3 test/gpu/tanh_error.py
  step "forward suite" 120 "$out/forward.log" \
    python3 test/gpu/test_forward.py --results "$out/forward-sm90.md"
  # The C++ API's prepared inputs (docs/runtime.md) from a host program: the bundle's jit-host times
  # document's forward both ways and fails unless the outputs are bit-identical.
  step "jit-host --prepared" 60 "$out/jit-host.log" \
    .device/bundle/bin/jit-host examples/document.yaml --prepared
fi
if [[ $benches == 1 ]]; then
  step "forward bench" 300 "$out/bench-fwd.log" \
    bash bench/run.sh "${rows[@]}" --md "$out/forward.md" --png "$out/forward.png" --json "$out/forward.json"
  python3 bench/targets.py "$out/forward.json" > "$out/targets.txt" 2>&1
  step "backward bench" 340 "$out/bench-bwd.log" \
    bash bench/run-backward.sh "${rows[@]}" --md "$out/backward.md" --json "$out/backward.json"
fi
if [[ $checks == 1 ]]; then
  step "backward suite" 240 "$out/backward.log" \
    python3 test/gpu/test_backward.py --results "$out/backward-sm90.md"
  step "sanitizers" 150 "$out/sanitize.log" bash test/gpu/sanitize.sh
fi
if [[ $jit == 1 ]]; then
  # Two rounds, the fastest of each spec's two cold compiles: one round on this machine varied by
  # up to 60% between calls.
  step "cold JIT" 240 "$out/jit.md" python3 bench/jit_time.py --lib "$ATTNC_LIB" --rounds 2 examples/*.yaml
fi
if [[ $checks == 1 ]]; then
  grep -hE "^FAIL" "$out/forward.log" "$out/backward.log" | head -n 8
  grep -E "SUMMARY" "$out/sanitize.log"
  grep -E "prepared" "$out/jit-host.log"
fi
if [[ $benches == 1 ]]; then
  grep -E "NOT met|: attnc/" "$out/targets.txt" | head -n 20
  grep "^|" "$out/backward.md" | cut -c1-110
fi
[[ $jit == 1 ]] && tail -n 23 "$out/jit.md"
echo "== gpu-final: $(date -u +%H:%M) UTC"
printf '%s\n' "${summary[@]}"
