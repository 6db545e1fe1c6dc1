#!/usr/bin/env bash
# Nsight Compute profile of one attnc kernel on one bench row (needs ncu, a CUDA GPU, torch and
# libattnc.so: $ATTNC_LIB or .device/bundle/): the forward kernel (fwd) or the backward's dK/dV
# kernel (bwd). Clocks are left as the GPU runs them (--clock-control none), so the numbers match
# the bench's. Writes OUT_PREFIX.{ncu-rep,txt,stalls.txt,sass.csv,log} and prints a summary.
#   bash dev/bench/profile.sh fwd|bwd ROW OUT_PREFIX      e.g. bwd "hd128 full N=4K" /tmp/bwd-hd128
set -euo pipefail
cd "$(dirname "$0")/../.."
pass=${1:?fwd or bwd}
row=${2:?row name, as the bench takes it with --only}
out=${3:?output prefix}
case "$pass" in
  fwd) kernel="_fwd\$"; bench=(python3 bench/bench_forward.py --no-flex --only "$row") ;;
  bwd) kernel="_bwd_kv\$"; bench=(python3 bench/bench_backward.py --no-flex --only "$row") ;;
  *) echo "profile.sh: the first argument is fwd or bwd, not $pass" >&2; exit 2 ;;
esac
export ATTNC_CACHE_DIR=${ATTNC_CACHE_DIR:-/tmp/attnc-cache}
ncu --clock-control none --kernel-name regex:"$kernel" --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
  --section SourceCounters --import-source no -o "$out" -f \
  "${bench[@]}" > "$out.log" 2>&1 || { tail -20 "$out.log"; exit 1; }
ncu --import "$out.ncu-rep" --page details --print-units base > "$out.txt"
ncu --import "$out.ncu-rep" --page raw --print-units base | grep -E "issue_stalled.*per_warp_active|smsp__inst_executed.sum |sm__pipe_tensor|pipe_fma|pipe_xu|pipe_alu" > "$out.stalls.txt" || true
ncu --import "$out.ncu-rep" --page source --csv --print-source sass > "$out.sass.csv" 2>/dev/null || true
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Stall|Issued Ipc|No Eligible|Eligible Warps|L1/TEX Hit|Bank Conflicts|Registers Per|Warp Cycles Per Issued" "$out.txt" | head -40
