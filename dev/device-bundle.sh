#!/usr/bin/env bash
# Builds libattnc.so (the C API, LLVM/MLIR inside), the attnc CLI, jit-host and decode-host, and
# puts stripped copies in .device/bundle/ (ignored by git) for the GPU machine: pass
# `carry: [".device/bundle"]` to the device tool. BUILD_DIR defaults to ./build (else ../build); it
# must already be configured.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
[[ -d "$BUILD_DIR" || ! -d ../build ]] || BUILD_DIR=../build  # a build tree beside the checkout
JOBS=${JOBS:-2}
BUNDLE=.device/bundle

ninja -C "$BUILD_DIR" -j"$JOBS" attncShared attnc jit-host decode-host
mkdir -p "$BUNDLE"
# The build's own library, not a copy that a test installed elsewhere in the tree.
lib=$BUILD_DIR/lib/libattnc.so
[[ -f "$lib" ]] || lib=$(find "$BUILD_DIR" -path '*/install/*' -prune -o -name 'libattnc.so*' -type f -print | head -n1)
[[ -n "$lib" ]] || { echo "device-bundle: no libattnc.so under $BUILD_DIR" >&2; exit 1; }
cp "$lib" "$BUNDLE/libattnc.so"
cp "$BUILD_DIR/bin/attnc" "$BUNDLE/attnc"
# scripts/demo.sh finds its tools under $BUILD_DIR/bin: BUILD_DIR=.device/bundle runs it there.
mkdir -p "$BUNDLE/bin"
cp "$BUILD_DIR/bin/jit-host" "$BUILD_DIR/bin/decode-host" "$BUNDLE/bin/"
strip --strip-unneeded "$BUNDLE/libattnc.so"
strip "$BUNDLE/attnc" "$BUNDLE/bin/jit-host" "$BUNDLE/bin/decode-host"
ln -sf ../attnc "$BUNDLE/bin/attnc"
# The commit the bundle was built from (-dirty with uncommitted changes to tracked files): the
# suites' result pages name the code they ran, and the GPU machine's copy may have no .git.
if commit=$(git rev-parse --verify -q HEAD); then
  git diff --quiet HEAD -- || commit+=-dirty
  echo "$commit" > "$BUNDLE/COMMIT"
fi
# The GPU machine has no LLVM: only system libraries may be needed at load time.
for f in "$BUNDLE/libattnc.so" "$BUNDLE/attnc" "$BUNDLE/bin/jit-host"; do
  if ldd "$f" | grep -vE 'linux-vdso|ld-linux|libc\.so|libm\.so|libstdc\+\+|libgcc_s|libdl\.so|libpthread' | grep -q '=>'; then
    echo "device-bundle: $f needs more than the system libraries:" >&2; ldd "$f" >&2; exit 1
  fi
done
du -ch "$BUNDLE"/* | tail -n1
ls -l "$BUNDLE"
