#!/usr/bin/env bash
# The decode combine's programmatic dependent launch in machine code (docs/runtime.md): on sm_90a
# the runtime may launch <NAME>_decode_combine while <NAME>_decode still runs, which is correct
# only if the combine waits for the decode grid (griddepcontrol.wait: ACQBULK) before its first
# global load, and the decode grid lets it launch (griddepcontrol.launch_dependents: PREEXIT).
#   test/sass-decode-pdl.sh CUOBJDUMP CUBIN NAME
# Exits 77 (ctest: skipped) when there is no cuobjdump (scripts/install-deps.sh fetches one).
set -euo pipefail
cuobjdump=$1 cubin=$2 name=$3
if [[ ! -x $cuobjdump ]]; then
  echo "sass-decode-pdl: no cuobjdump at $cuobjdump (scripts/install-deps.sh); skipped"
  exit 77
fi
sass=$("$cuobjdump" --dump-sass "$cubin")
function_sass() { awk -v f="$1" '/Function : /{on = ($NF == f)} on' <<<"$sass"; }
combine=$(function_sass "${name}_decode_combine")
decode=$(function_sass "${name}_decode")
[[ -n $combine && -n $decode ]] || {
  echo "sass-decode-pdl: no ${name}_decode or ${name}_decode_combine in $(basename "$cubin")"
  exit 1
}
# The line numbers of the combine's wait and of its first global load.
wait_at=$(awk '/ACQBULK/ {print NR; exit}' <<<"$combine")
load_at=$(awk '/[[:space:]]LDG/ {print NR; exit}' <<<"$combine")
trigger=$(grep -c 'PREEXIT' <<<"$decode" || true)
echo "sass-decode-pdl: ${name}: combine wait at line ${wait_at:-none}, first load at" \
     "${load_at:-none}; decode PREEXIT $trigger"
[[ -n $wait_at && -n $load_at && $wait_at -lt $load_at && $trigger -gt 0 ]]
