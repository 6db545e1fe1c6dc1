#!/usr/bin/env bash
# The Hopper machine-code check of one example: its sm_90a cubin (built by the example/<stem>/sm_90a
# test) must hold wgmma (HGMMA) and TMA loads (UTMALDG), and no local-memory access (LDL/STL); with
# FUNCTION, only that kernel's code is checked (e.g. a backward program's <name>_bwd_kv).
#   test/sass-check.sh CUOBJDUMP CUBIN [FUNCTION]
# Exits 77 (ctest: skipped) when there is no cuobjdump (scripts/install-deps.sh fetches one).
set -euo pipefail
cuobjdump=$1 cubin=$2 function=${3:-}
if [[ ! -x $cuobjdump ]]; then
  echo "sass-check: no cuobjdump at $cuobjdump (scripts/install-deps.sh); skipped"
  exit 77
fi
sass=$("$cuobjdump" --dump-sass "$cubin")
if [[ -n $function ]]; then
  # cuobjdump heads each kernel's code with "Function : <name>".
  sass=$(awk -v f="$function" '/Function : /{on = ($NF == f)} on' <<<"$sass")
  [[ -n $sass ]] || { echo "sass-check: no function $function in $(basename "$cubin")"; exit 1; }
fi
hgmma=$(grep -c 'HGMMA' <<<"$sass" || true)
utmaldg=$(grep -c 'UTMALDG' <<<"$sass" || true)
local_mem=$(grep -cE '\b(LDL|STL)(\.|\s)' <<<"$sass" || true)
echo "sass-check: $(basename "$cubin")${function:+ $function}: HGMMA $hgmma, UTMALDG $utmaldg, LDL/STL $local_mem"
[[ $hgmma -gt 0 && $utmaldg -gt 0 && $local_mem -eq 0 ]]
