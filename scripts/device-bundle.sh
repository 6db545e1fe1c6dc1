#!/usr/bin/env bash
# Builds libattnc.so (the C API, LLVM/MLIR inside) and the attnc CLI, and puts stripped copies in
# .device/bundle/ (ignored by git) for the GPU machine: pass `carry: [".device/bundle"]` to the
# device tool. BUILD_DIR defaults to ./build (else ../build); it must already be configured.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
[[ -d "$BUILD_DIR" || ! -d ../build ]] || BUILD_DIR=../build  # a build tree beside the checkout
JOBS=${JOBS:-2}
BUNDLE=.device/bundle

ninja -C "$BUILD_DIR" -j"$JOBS" attncShared attnc jit-host
mkdir -p "$BUNDLE"
lib=$(find "$BUILD_DIR" -name 'libattnc.so*' -type f | head -n1)
[[ -n "$lib" ]] || { echo "device-bundle: no libattnc.so under $BUILD_DIR" >&2; exit 1; }
cp "$lib" "$BUNDLE/libattnc.so"
cp "$BUILD_DIR/bin/attnc" "$BUNDLE/attnc"
# scripts/demo.sh finds its tools under $BUILD_DIR/bin: BUILD_DIR=.device/bundle runs it there.
mkdir -p "$BUNDLE/bin"
cp "$BUILD_DIR/bin/jit-host" "$BUNDLE/bin/jit-host"
strip --strip-unneeded "$BUNDLE/libattnc.so"
strip "$BUNDLE/attnc" "$BUNDLE/bin/jit-host"
ln -sf ../attnc "$BUNDLE/bin/attnc"
# The GPU machine has no LLVM: only system libraries may be needed at load time.
for f in "$BUNDLE/libattnc.so" "$BUNDLE/attnc" "$BUNDLE/bin/jit-host"; do
  if ldd "$f" | grep -vE 'linux-vdso|ld-linux|libc\.so|libm\.so|libstdc\+\+|libgcc_s|libdl\.so|libpthread' | grep -q '=>'; then
    echo "device-bundle: $f needs more than the system libraries:" >&2; ldd "$f" >&2; exit 1
  fi
done
du -ch "$BUNDLE"/* | tail -n1
ls -l "$BUNDLE"

# The backward kernels of a few examples, with their launch metadata, for test/gpu/backward_kernels.py.
mkdir -p "$BUNDLE/bwd"
for ex in causal_hd128 full_hd128 causal_hd64 full_hd64 softcap alibi gqa_32_8 hd72_fp16 causal_hd256 document custom_score; do
  "$BUILD_DIR/bin/attnc" compile "examples/$ex.yaml" --target sm_90a --backward --emit cubin -o "$BUNDLE/bwd/$ex.cubin"
  "$BUILD_DIR/bin/attnc" compile "examples/$ex.yaml" --target sm_90a --backward --emit tiled |
    grep -oE '\b(kv_block_kv|kv_warps|kv_smem_bytes|q_block_q|q_warps|q_smem_bytes|block_q|warps|smem_bytes|scale) = [0-9.e+-]+' |
    sort -u | tr '\n' ' ' > "$BUNDLE/bwd/$ex.meta"
  # The grids the launch takes (block_order.h): 1 where the kernel is built for the ordered one.
  "$BUILD_DIR/bin/attnc" compile "examples/$ex.yaml" --target sm_90a --backward --emit cuda |
    sed -nE 's/.*static constexpr bool k(Kv)?OrderedGrid = (true|false);.*/\1 \2/p' |
    awk '{print ($1 == "Kv" ? "kv_ordered" : "fwd_ordered") " = " ($NF == "true" ? 1 : 0)}' |
    tr '\n' ' ' >> "$BUNDLE/bwd/$ex.meta"
done
