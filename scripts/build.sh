#!/usr/bin/env bash
# `make build`: install missing dependencies, configure once, build with $JOBS jobs, report the time.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-2}
build_type=${BUILD_TYPE:-Release}
llvm_root=${LLVM_ROOT:-/usr/lib/llvm-22}

start=$EPOCHREALTIME
scripts/install-deps.sh "$build_dir"

# Configure only once: afterwards ninja re-runs CMake by itself when a CMakeLists.txt changes.
if [[ ! -f $build_dir/build.ninja ]]; then
  cmake -G Ninja -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="$build_type" \
        -DMLIR_DIR="$llvm_root/lib/cmake/mlir" -DLLVM_DIR="$llvm_root/lib/cmake/llvm"
fi

status=0
ninja -C "$build_dir" -j"$jobs" || status=$?
elapsed_ms=$(( (${EPOCHREALTIME//[.,]/} - ${start//[.,]/}) / 1000 ))
printf 'build: %s in %dm%02d.%ds (deps + configure + ninja -j%s, %s, %s)\n' \
  "$([[ $status -eq 0 ]] && echo done || echo FAILED)" $((elapsed_ms / 60000)) \
  $((elapsed_ms / 1000 % 60)) $((elapsed_ms / 100 % 10)) "$jobs" "$build_type" "$build_dir"
exit $status
