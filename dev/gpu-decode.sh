#!/usr/bin/env bash
# One device call for the decode path (dev/README.md), each step time-bounded (dev/gpu-steps.sh),
# then a short table. Steps: smoke (dev/decode_smoke.py), tiny, small and fullsubset (the decode
# suite's subsets), bench (quick), benchflex (quick, with FlexAttention), full and fullflex (every
# row), fullflex32 and fullflex64 (every row with FlexAttention, a GQA ratio each: two calls),
# nopdl (the batch-1 rows with the combine's launch not overlapped), probe (dev/decode_probe.py),
# memcheck and racecheck (the sanitizer subset), pyvarlen (test/gpu/test_python_varlen.py), host
# (examples/decode-host), ncu (Nsight Compute sections of the decode kernel on the rows in
# NCU_ROWS, bench row names separated by ';'). Run on the GPU machine from the repository root
# with the bundle carried (dev/device-bundle.sh); results land in $OUT.
#   bash dev/gpu-decode.sh [STEP...]   (default: smoke tiny bench memcheck)
set -u
source "$(dirname "$0")/gpu-steps.sh"
export ATTNC_LIB=$PWD/.device/bundle/libattnc.so ATTNC_CACHE_DIR=${ATTNC_CACHE_DIR:-/tmp/ac}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python:$PWD/test/gpu
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
steps=("$@")
[[ ${#steps[@]} -gt 0 ]] || steps=(smoke tiny bench memcheck)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for s in "${steps[@]}"; do
  case "$s" in
    smoke) step smoke 200 "$OUT/smoke.log" python3 dev/decode_smoke.py ;;
    tiny) step tiny 150 "$OUT/tiny.log" python3 test/gpu/test_decode.py --subset tiny \
            --json "$OUT/decode-tiny.json" ;;
    small) step small 240 "$OUT/small.log" python3 test/gpu/test_decode.py --subset small \
             --json "$OUT/decode-small.json" ;;
    bench) step bench 240 "$OUT/bench.log" python3 bench/bench_decode.py --quick --no-flex \
             --json "$OUT/decode-quick.json" ;;
    benchflex) step benchflex 400 "$OUT/benchflex.log" python3 bench/bench_decode.py --quick \
                 --json "$OUT/decode-quick-flex.json" ;;
    nopdl) step nopdl 200 "$OUT/nopdl.log" env ATTNC_DECODE_PDL=0 python3 bench/bench_decode.py \
             --no-flex --no-varlen --only B1 --json "$OUT/decode-nopdl.json" ;;
    probe) step probe 240 "$OUT/probe.log" python3 dev/decode_probe.py ;;
    full) step full 300 "$OUT/full.log" python3 bench/bench_decode.py --no-flex \
            --json "$OUT/decode-full.json" ;;
    fullflex) step fullflex 540 "$OUT/fullflex.log" python3 bench/bench_decode.py \
                --json "$OUT/decode-full.json" ;;
    # Every row with FlexAttention in two halves, one a GQA ratio (each of torch.compile's shapes
    # compiles anew): bench/decode_page.py joins decode-full-32.json decode-full-64.json. The
    # varlen row runs with the first.
    fullflex32) step fullflex32 420 "$OUT/fullflex32.log" python3 bench/bench_decode.py \
                  --only "GQA 32/8" --json "$OUT/decode-full-32.json" ;;
    fullflex64) step fullflex64 420 "$OUT/fullflex64.log" python3 bench/bench_decode.py \
                  --no-varlen --only "GQA 64/8" --json "$OUT/decode-full-64.json" ;;
    racecheck) step racecheck 300 "$OUT/racecheck.log" compute-sanitizer --tool racecheck \
                 --error-exitcode 1 python3 test/gpu/test_decode.py --sanitize ;;
    fullsubset) step fullsubset 400 "$OUT/fullsubset.log" python3 test/gpu/test_decode.py \
                  --subset full --json "$OUT/decode-fullsubset.json" ;;
    pyvarlen) step pyvarlen 240 "$OUT/pyvarlen.log" python3 test/gpu/test_python_varlen.py ;;
    host) step host 60 "$OUT/host.log" env LD_LIBRARY_PATH="$PWD/.device/bundle" \
            .device/bundle/bin/decode-host --steps 32 --check-every 8 ;;
    ncu)
      rows="GQA 64/8 B8 kv32K q8 contiguous;GQA 64/8 B8 kv32K q8 paged16"
      rows+=";GQA 32/8 B1 kv32K q1 contiguous"
      IFS=';' read -r -a ncu_rows <<<"${NCU_ROWS:-$rows}"
      for i in "${!ncu_rows[@]}"; do
        r=${ncu_rows[$i]}
        step "ncu-$i" 120 "$OUT/ncu-$i.log" ncu --kernel-name regex:'_decode$' --launch-skip 3 \
          --launch-count 1 --section SpeedOfLight --section WarpStateStats \
          --section SchedulerStats --section Occupancy --section MemoryWorkloadAnalysis \
          python3 bench/bench_decode.py --no-flex --no-varlen --only "$r"
      done ;;
    memcheck) step memcheck 200 "$OUT/memcheck.log" compute-sanitizer --tool memcheck \
                --error-exitcode 1 python3 test/gpu/test_decode.py --sanitize ;;
    *) echo "gpu-decode: unknown step '$s'" >&2 ;;
  esac
done
for s in "${steps[@]}"; do echo "== $s (tail)"; tail -n 25 "$OUT/$s.log" 2>/dev/null; done
echo; printf '%s\n' "${summary[@]}"
