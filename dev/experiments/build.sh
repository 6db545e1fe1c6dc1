#!/usr/bin/env bash
# Builds the library of each prepared experiment (dev/experiments/*.patch applied to HEAD) into
# .device/<name>/, and with --all also one of all of them together into .device/all/, for an A/B
# against .device/bundle/ (dev/device-bundle.sh) on the GPU machine; see dev/README.md.
# Each patch is applied in a worktree of its own under $EXPERIMENTS_WORK (../experiments-work),
# on a branch exp/<name> from HEAD (both reused and reset by later calls), and built by
# dev/branch-lib.sh; the checkout is untouched.
#   bash dev/experiments/build.sh [--all] [NAME ...]      (default: every dev/experiments/*.patch)
set -euo pipefail
cd "$(dirname "$0")/../.."
usage() { sed -n '8p' "$0" | sed -e 's/^#  */usage: /' >&2; exit 2; }
all=0 names=()
for arg in "$@"; do
  case "$arg" in
    --all) all=1 ;;
    -*) usage ;;
    *) names+=("$arg") ;;
  esac
done
if [[ ${#names[@]} -eq 0 ]]; then
  for p in dev/experiments/*.patch; do [[ -f $p ]] && names+=("$(basename "$p" .patch)"); done
  [[ ${#names[@]} -gt 0 ]] || { echo "experiments: no dev/experiments/*.patch waits" >&2; exit 0; }
fi
for name in "${names[@]}"; do
  [[ -f dev/experiments/$name.patch ]] || { echo "experiments: no dev/experiments/$name.patch" >&2; exit 2; }
done
work=${EXPERIMENTS_WORK:-../experiments-work}
head=$(git rev-parse HEAD)

# One branch exp/<label> from HEAD with the given patches applied and committed.
make_branch() {
  local label=$1; shift
  local tree=$work/$label
  mkdir -p "$work"
  if [[ -e $tree/.git ]]; then
    git -C "$tree" checkout --quiet -B "exp/$label" "$head"
  else
    git worktree add --quiet -B "exp/$label" "$tree" "$head"
  fi
  for patch in "$@"; do git -C "$tree" apply "$PWD/experiments/$patch.patch"; done
  git -C "$tree" add -A
  git -C "$tree" commit --quiet -m "experiment $label: $*"
}

for name in "${names[@]}"; do
  make_branch "$name" "$name"
  bash dev/branch-lib.sh "exp/$name" "$name"
done
if [[ $all == 1 ]]; then
  make_branch all "${names[@]}"
  bash dev/branch-lib.sh exp/all all
fi
ls -d .device/*/ 2>/dev/null
