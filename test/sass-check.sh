#!/usr/bin/env bash
# The Hopper machine-code check of one example: its sm_90a cubin (built by the example/<stem>/sm_90a
# test) must hold wgmma (HGMMA) and TMA loads (UTMALDG), and no local-memory access (LDL/STL).
#   test/sass-check.sh CUOBJDUMP CUBIN
# Exits 77 (ctest: skipped) when there is no cuobjdump (scripts/install-deps.sh fetches one).
set -euo pipefail
cuobjdump=$1 cubin=$2
if [[ ! -x $cuobjdump ]]; then
  echo "sass-check: no cuobjdump at $cuobjdump (scripts/install-deps.sh); skipped"
  exit 77
fi
sass=$("$cuobjdump" --dump-sass "$cubin")
hgmma=$(grep -c 'HGMMA' <<<"$sass" || true)
utmaldg=$(grep -c 'UTMALDG' <<<"$sass" || true)
local_mem=$(grep -cE '\b(LDL|STL)(\.|\s)' <<<"$sass" || true)
echo "sass-check: $(basename "$cubin"): HGMMA $hgmma, UTMALDG $utmaldg, LDL/STL $local_mem"
[[ $hgmma -gt 0 && $utmaldg -gt 0 && $local_mem -eq 0 ]]
