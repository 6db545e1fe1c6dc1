#!/usr/bin/env bash
# The decode mainloop's per-tile work in machine code (docs/design/decode.md): a whole K or V tile
# is copied without a per-row zero-fill predicate (DecodeProducer::loadWhole: each thread steps its
# rows by one stride; ROWS_A_THREAD copies a thread and tile for K and for V, in the contiguous
# or large-page path and in each small-page one), and O's rescale is skipped by a warp vote (lazy
# row maxima, OnlineSoftmax::advanceLazy).
#   test/sass-decode-mainloop.sh CUOBJDUMP CUBIN NAME ROWS_A_THREAD
# Exits 77 (ctest: skipped) when there is no cuobjdump (scripts/install-deps.sh fetches one).
set -euo pipefail
cuobjdump=$1 cubin=$2 name=$3 rows=$4
if [[ ! -x $cuobjdump ]]; then
  echo "sass-decode-mainloop: no cuobjdump at $cuobjdump (scripts/install-deps.sh); skipped"
  exit 77
fi
decode=$("$cuobjdump" --dump-sass "$cubin" |
         awk -v f="${name}_decode" '/Function : /{on = ($NF == f)} on')
[[ -n $decode ]] || { echo "sass-decode-mainloop: no ${name}_decode in $(basename "$cubin")"; exit 1; }
# A copy with no zero-fill operand ends in its global address: "[R12.64] ;" (a predicated one ends
# in ", !P3 ;" or ", P3 ;").
whole=$(grep -cE '^[[:space:]]*/\*[0-9a-f]+\*/[[:space:]]+LDGSTS[^;]*\.64\][[:space:]]*;' \
          <<<"$decode" || true)
votes=$(grep -c 'VOTE.ANY' <<<"$decode" || true)
# K and V, at least two paths each.
want=$((4 * rows))
echo "sass-decode-mainloop: ${name}: $whole copies without zero-fill (want >= $want)," \
     "$votes warp votes (want >= 1)"
[[ $whole -ge $want && $votes -ge 1 ]]
