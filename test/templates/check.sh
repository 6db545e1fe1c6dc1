#!/usr/bin/env bash
# Compile checks of the device templates (no GPU needed; philox.h's host checks are unit tests,
# test/unit/DropoutTest.cpp): every sample TU under test/templates/sm80 (forward samples and the
# bwd_* backward samples) and test/templates/common with nvcc and with NVRTC for sm_80 and sm_90a.
# Fails on any compile error or warning, any register spill or stack frame, and any local-memory
# access (LDL/STL) in the SASS. Prints the ptxas resource line of each kernel.
#   CUDA_HOME  (default /usr/local/cuda)
#   CUOBJDUMP  (default: cuobjdump on PATH or in $CUDA_HOME/bin; the SASS scan is skipped, loudly,
#               when there is none: the pip wheel nvidia-cuda-cuobjdump + nvidia-cuda-nvdisasm works)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
templates="${ATTNC_TEMPLATES:-$root/templates}"  # override to try a patched tree
cuda="${CUDA_HOME:-/usr/local/cuda}"
nvcc="$cuda/bin/nvcc"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

cuobjdump="${CUOBJDUMP:-}"
if [[ -z "$cuobjdump" ]]; then
  if command -v cuobjdump >/dev/null; then cuobjdump=cuobjdump
  elif [[ -x "$cuda/bin/cuobjdump" ]]; then cuobjdump="$cuda/bin/cuobjdump"; fi
fi

echo "-- NVRTC driver"
g++ -std=c++17 -O1 -Wall -I "$cuda/include" "$here/nvrtc_compile.cpp" -L "$cuda/lib64" -lnvrtc \
  -Wl,-rpath,"$cuda/lib64" -o "$work/nvrtc_compile"

# check_report <label> <log> <cubin>
check_report() {
  local label="$1" log="$2" cubin="$3"
  if grep -qiE "error|warning" "$log"; then fail "$label: diagnostics"; cat "$log"; fi
  if grep -E "spill (stores|loads)" "$log" | grep -qvE "0 bytes spill stores, 0 bytes spill loads"; then
    fail "$label: register spills"
  fi
  if grep -E "bytes stack frame" "$log" | grep -qv " 0 bytes stack frame"; then fail "$label: stack frame"; fi
  if [[ -n "$cuobjdump" && -s "$cubin" ]]; then
    local local_ops
    local_ops=$("$cuobjdump" -sass "$cubin" | grep -cE "\b(LDL|STL)\b" || true)
    [[ "$local_ops" == 0 ]] || fail "$label: $local_ops local-memory instructions in SASS"
  fi
  # One line per kernel: a TU with several entry points (the backward samples) reports each.
  local regs
  regs=$(awk '/Function properties for/ {fn=$NF} /Used [0-9]+ registers/ {
           match($0, /Used [0-9]+ registers/); r=substr($0, RSTART+5, RLENGTH-15);
           printf "%s%s=%s", sep, fn, r; sep=" "}' "$log")
  printf '%-48s %s\n' "$label" "$regs"
}

for src in "$here"/sm80/*.cu "$here"/common/*.cu; do
  name="$(basename "$src" .cu)"
  for arch in sm_80 sm_90a; do
    log="$work/$name.$arch.nvcc.log"
    cubin="$work/$name.$arch.nvcc.cubin"
    if "$nvcc" -std=c++17 -arch="$arch" -I "$templates" -Xptxas -v --cubin -o "$cubin" "$src" >"$log" 2>&1; then
      check_report "nvcc  $name $arch" "$log" "$cubin"
    else
      fail "nvcc $name $arch"; cat "$log"
    fi
    log="$work/$name.$arch.nvrtc.log"
    cubin="$work/$name.$arch.nvrtc.cubin"
    if "$work/nvrtc_compile" "$templates" "$arch" "$src" "$cubin" >"$log" 2>&1; then
      check_report "nvrtc $name $arch" "$log" "$cubin"
    else
      fail "nvrtc $name $arch"; cat "$log"
    fi
  done
done

[[ -n "$cuobjdump" ]] || echo "WARNING: no cuobjdump found: SASS was not scanned for LDL/STL"
if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "all template checks passed"
