#!/usr/bin/env bash
# `make install` gives a CMake package that works on its own: into a fresh prefix, then
# examples/build-time configured with find_package(attnc) from that prefix only, its kernels
# compiled by the installed attnc (a quoted `name:`, BACKWARD) and the app linked against the
# installed runtime (compile and link: no GPU needed); and examples/c-api linked against the
# installed libattnc.so through attnc::attnc_c, run to compile a spec for sm_90a (NVRTC, no GPU).
# Exit status 0 when all of it holds.
#   test/tools/install-check.sh SOURCE_DIR BUILD_DIR [GENERATOR]     (default: Ninja)
set -euo pipefail
[[ $# -eq 2 || $# -eq 3 ]] ||
  { echo "usage: install-check.sh SOURCE_DIR BUILD_DIR [GENERATOR]" >&2; exit 2; }
src=$(realpath "$1") build=$(realpath "$2") generator=${3:-Ninja}
unset DESTDIR  # the check reads what landed under PREFIX itself
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "install-check: $*" >&2; exit 1; }

# BUILD_DIR is already built (ctest runs after the build): `make install` rebuilds nothing.
make -C "$src" --no-print-directory install BUILD_DIR="$build" PREFIX="$prefix" \
  >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log" >&2; fail "make install failed"; }

for f in bin/attnc lib/libattnc.so lib/libattncRuntime.a include/attnc/attnc.h \
         include/attnc/attnc_c.h \
         lib/cmake/attnc/attncConfig.cmake lib/cmake/attnc/attncTargets.cmake \
         lib/cmake/attnc/AttncKernels.cmake; do
  [[ -e $prefix/$f ]] || fail "make install put no $f under PREFIX"
done
# A prefix that pointed back into the build tree would pass the example below without being
# usable anywhere else.
[[ ! -e $prefix/lib/cmake/attnc/attncBuildTree.cmake ]] ||
  fail "the installed package includes the build tree's targets"
if grep -rqF "$build" "$prefix/lib/cmake/attnc"; then
  fail "the installed package names the build tree $build"
fi

ATTNC_CACHE_DIR=$tmp/cache ctest --build-and-test "$src/examples/build-time" "$tmp/app" \
  --build-generator "$generator" \
  --build-options -Dattnc_DIR="$prefix/lib/cmake/attnc" -DCMAKE_BUILD_TYPE=Release \
  >"$tmp/app.log" 2>&1 || { cat "$tmp/app.log" >&2; fail "examples/build-time against PREFIX"; }
# The app's build rules (build.ninja, or the Makefiles' link.txt and build.make).
grep -rqF "$prefix/bin/attnc" "$tmp/app" ||
  fail "examples/build-time did not compile its kernels with PREFIX/bin/attnc"
grep -rqF "$prefix/lib/libattncRuntime.a" "$tmp/app" ||
  fail "examples/build-time did not link PREFIX/lib/libattncRuntime.a"
header=$(find "$tmp/app" -name causal_hd64.h | head -1)
grep -qF "causal_hd64_backward(" "$header" ||
  fail "attnc_add_kernels(... BACKWARD) gave no causal_hd64_backward in $header"
[[ -n $(find "$tmp/app" -name build_time_quoted.h) ]] ||
  fail "attnc_add_kernels named no header after the quoted name: \"build_time_quoted\""

ATTNC_CACHE_DIR=$tmp/cache ctest --build-and-test "$src/examples/c-api" "$tmp/c-api" \
  --build-generator "$generator" \
  --build-options -Dattnc_DIR="$prefix/lib/cmake/attnc" -DCMAKE_BUILD_TYPE=Release \
  --test-command "$tmp/c-api/c-api-app" \
  >"$tmp/c-api.log" 2>&1 || { cat "$tmp/c-api.log" >&2; fail "examples/c-api against PREFIX"; }
grep -rqF "$prefix/lib/libattnc.so" "$tmp/c-api" ||
  fail "examples/c-api did not link PREFIX/lib/libattnc.so"
grep -qF "c_api_causal for sm_90a" "$tmp/c-api.log" ||
  { cat "$tmp/c-api.log" >&2; fail "examples/c-api did not compile its spec through libattnc.so"; }
echo "install-check: make install into a fresh prefix; examples/build-time and c-api build" \
     "against it"
