#!/usr/bin/env bash
# The spec fuzzer's long run (test/fuzz/README.md): ROUNDS rounds of CASES generated specs, each
# round with its own seed and in its own process, the generator free to go past the front end's
# limits, one accepted spec in NVRTC_EVERY also through NVRTC on sm_80 and sm_90a. A crash or
# hang is reported with its round, seed and case, and that round goes on from the next case. The
# failing specs land in OUT; the last line sums the rounds up. Exit status 0 when nothing failed.
#   dev/fuzz.sh [BUILD_DIR]                      (default: build)
# Then CAPI_CASES calls of the C API argument fuzzer (test/fuzz/capi_fuzz.cpp) with seed SEED.
# Environment: ROUNDS (3), CASES (10000), SEED (first round's seed, 1), NVRTC_EVERY (100),
# TIMEOUT (CPU seconds per compile, 20), CAPI_CASES (5000), OUT (BUILD_DIR/fuzz-failures).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${ROUNDS:-3}
cases=${CASES:-10000}
seed=${SEED:-1}
# About 30 minutes of CPU for the default 3 x 10,000: 2,000 cases of one round at NVRTC_EVERY=100
# took 116 s of CPU (18 NVRTC compiles of accepted specs, 17 crashes resumed, 2 compiles
# stopped at the 20 s limit), so 30,000 take about 15 times that; on a loaded machine the wall
# time grows with the load.
nvrtc_every=${NVRTC_EVERY:-100}
timeout=${TIMEOUT:-20}
out=${OUT:-$build/fuzz-failures}
fuzzer=$build/bin/attnc-spec-fuzz

capi_cases=${CAPI_CASES:-5000}

ninja -C "$build" attnc-spec-fuzz attnc-capi-fuzz >/dev/null ||
  { echo "fuzz: build failed" >&2; exit 2; }
mkdir -p "$out"

declare -A total=()
deaths=()
started=$SECONDS
for ((round = 1; round <= rounds; ++round)); do
  round_seed=$((seed + round - 1))
  first=0
  while ((first < cases)); do
    log=$out/round$round-from$first.log
    # In a subshell whose own report of a crash goes nowhere: the log says more.
    ("$fuzzer" --seed="$round_seed" --first="$first" --cases=$((cases - first)) \
              --nvrtc-every="$nvrtc_every" --timeout="$timeout" --exceed-limits --out="$out" \
              >"$log" 2>&1
     exit $?) 2>/dev/null
    rc=$?
    # The summary line; a dying process (a crash, or the watchdog's exit status 3 on a hang)
    # prints one for the cases before the one it died in.
    summary=$(grep -a '^specfuzz: seed=' "$log" | tail -1)
    for pair in ${summary#specfuzz: }; do
      key=${pair%%=*} value=${pair#*=}
      [[ $key == seed || $key == slowest-* ]] && continue
      total[$key]=$(awk -v a="${total[$key]:-0}" -v b="$value" 'BEGIN { print a + b }')
    done
    if ((rc == 0 || rc == 1)); then
      echo "round $round (seed $round_seed, cases $first..$((cases - 1))): ${summary#specfuzz: }"
      break
    fi
    where=$(grep -ao 'in seed [0-9]* case [0-9]*' "$log" | tail -1)
    case_number=${where##* }
    kind=crash
    ((rc == 3)) && kind=hang
    echo "round $round (seed $round_seed): $kind (exit status $rc) $where; log $log"
    deaths+=("$kind:seed$round_seed/case${case_number:-?}")
    total[failures-$kind]=$((${total[failures-$kind]:-0} + 1))
    total[failures]=$((${total[failures]:-0} + 1))
    [[ -z $case_number ]] && break  # died outside a case: nothing to resume from
    total[cases]=$((${total[cases]:-0} + 1))
    first=$((case_number + 1))
  done
done

capi_log=$out/capi.log
ATTNC_CACHE_DIR=$out/capi-cache "$build/bin/attnc-capi-fuzz" --seed="$seed" --cases="$capi_cases" \
  >"$capi_log" 2>&1
capi_rc=$?
capi_summary=$(grep -a '^capi-fuzz:' "$capi_log" | tail -1)
echo "C API fuzzer (exit status $capi_rc): ${capi_summary:-no summary; log $capi_log}"
if ((capi_rc != 0)); then
  total[failures-capi]=1
  total[failures]=$((${total[failures]:-0} + 1))
fi

line="fuzz: $rounds rounds, $((SECONDS - started)) s:"
for key in cases accepted rejected register-budget nvrtc-compiled failures; do
  line+=" $key=${total[$key]:-0}"
done
for key in $(printf '%s\n' "${!total[@]}" | grep '^failures-' | sort); do
  line+=" $key=${total[$key]}"
done
((${#deaths[@]})) && line+=" (died at: ${deaths[*]})"
echo "$line"
[[ ${total[failures]:-0} == 0 ]]
