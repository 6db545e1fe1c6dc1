#!/usr/bin/env bash
# Builds a deliberately broken libattnc for the GPU mutation check (test/gpu/mutation.sh): the
# derivative rule of tanh in attn-derive-backward becomes 1 - tanh instead of 1 - tanh^2, so the
# softcap backward is wrong while everything else is unchanged. The library lands in
# .device/mutant/libattnc.so (ignored by git); the source is restored and the build tree rebuilt
# clean whatever happens. BUILD_DIR: a configured build tree (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}
src=dialects/Attn/Transforms/ScoreGradient.cpp
backup=$(mktemp)
cp "$src" "$backup"
restore() {
  cp "$backup" "$src" && rm -f "$backup"
  ninja -C "$BUILD_DIR" -j"$JOBS" attncShared >/dev/null
}
trap restore EXIT

python3 - "$src" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
rule = "out = mul(sub(constant(1.0), mul(result, result)), d(0));"
if text.count(rule) != 1:
    sys.exit(f"mutant-bundle: the tanh rule '{rule}' is not in {path} exactly once")
open(path, "w").write(text.replace(rule, "out = mul(sub(constant(1.0), result), d(0));"))
PY
ninja -C "$BUILD_DIR" -j"$JOBS" attncShared
lib=$(find "$BUILD_DIR" -name 'libattnc.so*' -type f | head -n1)
mkdir -p .device/mutant
cp "$lib" .device/mutant/libattnc.so
strip --strip-unneeded .device/mutant/libattnc.so
echo "mutant-bundle: .device/mutant/libattnc.so (d tanh = 1 - tanh)"
