#!/usr/bin/env bash
# dev/sass-diff.sh on one spec: a CLI against itself is identical everywhere (exit 0, every
# kernel counted), and against itself with another kv tile (--block-kv 64) the forward differs
# (exit 1, the kernel named).
#   test/tools/sass-diff-check.sh ATTNC CUOBJDUMP
# Exits 77 (ctest: skipped) without a cuobjdump.
set -uo pipefail
attnc=$1 cuobjdump=$2
if [[ ! -x $cuobjdump ]]; then
  echo "sass-diff-check: no cuobjdump at $cuobjdump; skipped"
  exit 77
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '#!/usr/bin/env bash\nexec "%s" "$@" --block-kv 64\n' "$attnc" > "$work/attnc-bkv64"
chmod +x "$work/attnc-bkv64"
export CUOBJDUMP=$cuobjdump
fail=0

out=$(bash "$root/dev/sass-diff.sh" --target sm_90a --spec "$root/examples/full_hd64.yaml" \
        "$attnc" "$attnc" 2>&1)
rc=$?
echo "$out"
if [[ $rc -ne 0 ]] || ! grep -qE '^sass-diff: [1-9][0-9]* kernels identical, 0 differ' <<<"$out"; then
  echo "FAIL: a CLI against itself: expected exit 0 and every kernel identical, got exit $rc"
  fail=1
fi

out=$(bash "$root/dev/sass-diff.sh" --target sm_90a --spec "$root/examples/full_hd64.yaml" \
        --forward "$attnc" "$work/attnc-bkv64" 2>&1)
rc=$?
echo "$out"
if [[ $rc -ne 1 ]] || ! grep -q '^differs: full_hd64.sm_90a.full_hd64_fwd' <<<"$out"; then
  echo "FAIL: another kv tile: expected exit 1 and full_hd64_fwd named, got exit $rc"
  fail=1
fi
exit $fail
