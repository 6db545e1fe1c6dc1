#!/usr/bin/env bash
# Builds the libattnc.so of another revision (a wip branch, a commit) for an A/B on the GPU machine:
# a stripped copy in .device/NAME/libattnc.so (ignored by git, carried with `.device`), the
# revision's commit in .device/NAME/REVISION. The checkout is untouched: the revision is built in a
# worktree of its own and a build tree beside it, both reused by later calls (the first build of a
# tree takes about as long as `make build`; later ones rebuild what the revision changes).
#   bash dev/branch-lib.sh REV NAME      e.g. wip/fwd-rotated-loop rotated
# then on the GPU machine: python3 dev/bench/ab_mix.py --lib .device/bundle/libattnc.so \
#   --lib .device/NAME/libattnc.so --only ROW ...
# WORK (default ../branch-lib): where the worktree and the build tree live; JOBS as for ninja.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '7p' "$0" | sed -e 's/^#  */usage: /' >&2; exit 2; }
[[ $# -eq 2 ]] || usage
rev=$1 name=$2
[[ $name =~ ^[A-Za-z0-9._-]+$ && $name != bundle ]] ||
  { echo "branch-lib: NAME: expected letters, digits, '.', '_' or '-' (not 'bundle'), got '$name'" >&2; exit 2; }
commit=$(git rev-parse --verify --quiet "$rev^{commit}") ||
  { echo "branch-lib: REV: no such revision: '$rev'" >&2; exit 2; }
work=${WORK:-../branch-lib}
jobs=${JOBS:-2}
llvm_root=${LLVM_ROOT:-/usr/lib/llvm-22}
tree=$work/src build=$work/build

if [[ ! -e $tree/.git ]]; then
  mkdir -p "$work"
  git worktree add --detach "$tree" "$commit" >/dev/null
else
  git -C "$tree" checkout --quiet --detach "$commit"
fi
if [[ ! -f $build/build.ninja ]]; then
  cmake -G Ninja -S "$tree" -B "$build" -DCMAKE_BUILD_TYPE=Release \
        -DMLIR_DIR="$llvm_root/lib/cmake/mlir" -DLLVM_DIR="$llvm_root/lib/cmake/llvm" >/dev/null
fi
ninja -C "$build" -j"$jobs" attncShared
lib=$(find "$build" -name 'libattnc.so*' -type f | head -n1)
[[ -n $lib ]] || { echo "branch-lib: no libattnc.so under $build" >&2; exit 1; }
mkdir -p ".device/$name"
strip --strip-unneeded -o ".device/$name/libattnc.so" "$lib"
echo "$commit" > ".device/$name/REVISION"
echo "branch-lib: .device/$name/libattnc.so from $(git log -1 --format='%h %s' "$commit" | cut -c1-80)"
