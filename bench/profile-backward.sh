#!/usr/bin/env bash
# Nsight Compute profile of attnc's backward dK/dV kernel on one bench row (needs ncu, a CUDA GPU,
# torch and libattnc.so: $ATTNC_LIB or .device/bundle/). Clocks are left as the GPU runs them
# (--clock-control none), so the numbers match the bench's.
#   bash bench/profile-backward.sh ROW OUT_PREFIX      e.g. "hd128 full N=4K" /tmp/bwd-hd128
set -euo pipefail
cd "$(dirname "$0")/.."
row=${1:?row name (bench_backward.py --only)}
out=${2:?output prefix}
export ATTNC_CACHE_DIR=${ATTNC_CACHE_DIR:-/tmp/attnc-cache}
ncu --clock-control none --kernel-name regex:'_bwd_kv$' --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
  --section SourceCounters --import-source no -o "$out" -f \
  python3 bench/bench_backward.py --quick --no-flex --only "$row" > "$out.log" 2>&1 || { tail -20 "$out.log"; exit 1; }
ncu --import "$out.ncu-rep" --page details --print-units base > "$out.txt"
ncu --import "$out.ncu-rep" --page raw --print-units base | grep -E "issue_stalled.*per_warp_active|smsp__inst_executed.sum |sm__pipe_tensor" > "$out.stalls.txt" || true
ncu --import "$out.ncu-rep" --page source --csv --print-source sass > "$out.sass.csv" 2>/dev/null || true
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Stall|Issued Ipc|No Eligible|Eligible Warps|L1/TEX Hit|Bank Conflicts|Registers Per|Warp Cycles Per Issued" "$out.txt" | head -60
