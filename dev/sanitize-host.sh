#!/usr/bin/env bash
# The host code (spec parser, MLIR passes, emitter, JIT, runtime, C API) under AddressSanitizer and
# UndefinedBehaviorSanitizer, without a GPU: a build of its own with -fsanitize=address,undefined
# (LLVM/MLIR's static libraries are not instrumented, attnc's code is), then the GoogleTest units,
# the C API tests, the lit suite and short runs of the spec and C API fuzzers (test/fuzz), every
# sanitizer report fatal. Not part of `make check` (it is a second build: about 12 minutes on two
# cores, the tests about 5 more); run it after changes to host code. The last line is a summary; exit status 0 when everything passed clean.
#   dev/sanitize-host.sh [BUILD_DIR]      (default: ../build-asan, beside the checkout)
# JOBS as for ninja (default 2); LLVM_ROOT as for scripts/build.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-../build-asan}
jobs=${JOBS:-2}
llvm_root=${LLVM_ROOT:-/usr/lib/llvm-22}
flags="-fsanitize=address,undefined -fno-omit-frame-pointer"
if [[ ! -f $build/build.ninja ]]; then
  cmake -G Ninja -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
        -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
        -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
        -DMLIR_DIR="$llvm_root/lib/cmake/mlir" -DLLVM_DIR="$llvm_root/lib/cmake/llvm" >/dev/null ||
    { echo "sanitize-host: cmake failed" >&2; exit 2; }
fi
ninja -C "$build" -j"$jobs" || { echo "sanitize-host: build failed" >&2; exit 2; }

# Any report ends the process with an error. Leak checking stays off: libnvrtc's ptxas threads
# outlive a compile (docs/runtime.md), and LeakSanitizer cannot stop them at exit now and then.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:halt_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
failed=()
run() {
  local name=$1
  shift
  echo "== $name"
  "$@" || failed+=("$name")
}
run "unit tests" "$build/bin/attnc-unit-tests" --gtest_brief=1
run "C API tests" "$build/bin/attnc-capi-tests" --gtest_brief=1
run "lit" "$llvm_root/bin/lit" -q "$build/test"
# The spec fuzzer: cases inside the front end's limits as in make check, then cases past them
# (deep nesting, long chains and names, oversized specs); a few accepted specs through NVRTC.
run "spec fuzzer" "$build/bin/attnc-spec-fuzz" --seed=48 --cases=1000 --nvrtc-every=250 \
    --timeout=120 --out="$build/fuzz-failures"
run "spec fuzzer past the limits" "$build/bin/attnc-spec-fuzz" --seed=49 --cases=300 \
    --exceed-limits --timeout=120 --out="$build/fuzz-failures"
run "C API fuzzer" env ATTNC_CACHE_DIR="$build/capi-fuzz-cache" "$build/bin/attnc-capi-fuzz" \
    --seed=1 --cases=5000
runs=6
if [[ ${#failed[@]} -eq 0 ]]; then
  echo "sanitize-host: $runs passed, 0 failed (ASan + UBSan, $build)"
else
  echo "sanitize-host: $((runs - ${#failed[@]})) passed, ${#failed[@]} failed: ${failed[*]}"
  exit 1
fi
