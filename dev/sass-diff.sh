#!/usr/bin/env bash
# Whether a template change changes machine code: compiles every example and test/kernel-specs
# spec with two attnc CLIs (e.g. main's build and a branch's, dev/branch-lib.sh) and compares
# the SASS of each kernel, with addresses, encodings and whitespace stripped so that only
# instructions and their operands count. A change whose SASS is identical everywhere needs no GPU
# A/B; one that differs must be measured (dev/README.md).
#   dev/sass-diff.sh [--target T]... [--spec FILE]... [--forward] [--keep DIR] ATTNC_A ATTNC_B
# --target: sm_90a and sm_80 unless told; --spec: these specs only (default: examples/*.yaml and
# test/kernel-specs/*.yaml); --forward: forward kernels only (no --backward); --keep DIR: leave
# the normalized listings there (DIR/a, DIR/b) for `diff`. Prints a line per spec, target and
# kernel that differs (SASS lines A -> B), then a summary; exit status 0 when everything is
# identical, 1 when something differs, 2 on a usage or compile error or when no kernel was read.
# ATTNC_A may instead be a DIR an earlier --keep left: its a/ listings are read, not rebuilt (a
# baseline kept once serves every later comparison of those targets and specs, with or without
# --forward as it was kept).
# CUOBJDUMP: the cuobjdump to use (default: the build's tools/bin/cuobjdump, then PATH).
set -uo pipefail

usage() { sed -n '7p' "$0" | sed -e 's/^#  */usage: /' >&2; exit 2; }
targets=() specs=() backward=--backward keep=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --target) [[ $# -ge 2 ]] || usage; targets+=("$2"); shift 2 ;;
    --spec) [[ $# -ge 2 && -f $2 ]] || { echo "sass-diff: --spec: no such file: ${2:-}" >&2; exit 2; }
            specs+=("$(realpath "$2")"); shift 2 ;;
    --forward) backward=""; shift ;;
    --keep) [[ $# -ge 2 ]] || usage; keep=$2; shift 2 ;;
    -*) echo "sass-diff: unknown option '$1'" >&2; usage ;;
    *) break ;;
  esac
done
[[ $# -eq 2 ]] || usage
clis=() kept_a=""
if [[ -d $1 ]]; then
  [[ -d $1/a ]] || { echo "sass-diff: $1 has no a/ listings of an earlier --keep" >&2; exit 2; }
  kept_a=$(realpath "$1/a")
fi
for cli in "$1" "$2"; do
  [[ -n $kept_a && $cli == "$1" ]] && { clis+=(""); continue; }
  [[ -x $cli ]] || { echo "sass-diff: not an executable attnc: $cli" >&2; exit 2; }
  clis+=("$(realpath "$cli")")
done
# (paths given on the command line are the caller's; the rest are the repository's)
cd "$(dirname "$0")/.."
[[ ${#targets[@]} -gt 0 ]] || targets=(sm_90a sm_80)
[[ ${#specs[@]} -gt 0 ]] || specs=(examples/*.yaml test/kernel-specs/*.yaml)
cuobjdump=${CUOBJDUMP:-}
if [[ -z $cuobjdump ]]; then
  for c in build/tools/bin/cuobjdump ../build/tools/bin/cuobjdump "$(command -v cuobjdump || true)"; do
    [[ -n $c && -x $c ]] && { cuobjdump=$c; break; }
  done
fi
[[ -n $cuobjdump && -x $cuobjdump ]] ||
  { echo "sass-diff: no cuobjdump (set CUOBJDUMP; scripts/install-deps.sh fetches one)" >&2; exit 2; }

work=${keep:-$(mktemp -d)}
[[ -n $keep ]] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work/a" "$work/b"
# (a kept baseline's listings of the chosen specs and targets only)
if [[ -n $kept_a && $kept_a != "$(realpath "$work/a")" ]]; then
  for target in "${targets[@]}"; do
    for spec in "${specs[@]}"; do
      cp "$kept_a/$(basename "$spec" .yaml).$target."*.sass "$work/a/" 2>/dev/null
    done
  done
fi

# SASS of one cubin, one file per kernel: "Function : NAME" starts a kernel; comments (addresses,
# encodings) and runs of blanks go.
split_sass() {
  local cubin=$1 prefix=$2
  "$cuobjdump" --dump-sass "$cubin" |
    awk -v prefix="$prefix" '
      /Function : /{ name = $NF; next }
      name != "" {
        gsub(/\/\*[^*]*\*\//, ""); gsub(/[ \t]+/, " "); sub(/^ /, ""); sub(/ ;/, ";")
        if ($0 != "" && $0 != ";") print > (prefix "." name ".sass")
      }'
}

# Both CLIs, one target and side at a time in the background (two CPUs: A and B at once).
compile_all() {
  local side=$1 cli=$2 cache
  cache=$(mktemp -d)
  for target in "${targets[@]}"; do
    for spec in "${specs[@]}"; do
      local stem cubin
      stem=$(basename "$spec" .yaml)
      cubin=$work/$side/$stem.$target.cubin
      if ! ATTNC_CACHE_DIR=$cache "$cli" compile "$spec" --target "$target" $backward \
          --emit cubin -o "$cubin" 2>"$cubin.err"; then
        echo "sass-diff: $side ($cli) failed on $spec for $target:" >&2
        head -n 5 "$cubin.err" >&2
        echo fail >"$work/$side.failed"
        continue
      fi
      split_sass "$cubin" "$work/$side/$stem.$target"
      rm -f "$cubin" "$cubin.err"
    done
  done
  rm -rf "$cache"
}
[[ -n $kept_a ]] || compile_all a "${clis[0]}" &
compile_all b "${clis[1]}" &
wait
[[ ! -e $work/a.failed && ! -e $work/b.failed ]] || exit 2

same=0 differ=0
shopt -s nullglob  # (no listing at all: counted below, not taken for a file named *.sass)
for f in "$work"/a/*.sass "$work"/b/*.sass; do
  rel=${f#"$work"/?/}
  [[ -e $work/a/$rel ]] || { echo "only in B: ${rel%.sass}"; differ=$((differ + 1)); continue; }
  [[ -e $work/b/$rel ]] || { echo "only in A: ${rel%.sass}"; differ=$((differ + 1)); continue; }
  [[ $f == "$work"/a/* ]] || continue  # each kernel once
  if cmp -s "$work/a/$rel" "$work/b/$rel"; then
    same=$((same + 1))
  else
    echo "differs: ${rel%.sass} ($(wc -l <"$work/a/$rel") -> $(wc -l <"$work/b/$rel") lines)"
    differ=$((differ + 1))
  fi
done
echo "sass-diff: $same kernels identical, $differ differ (${targets[*]}${backward:+, forward and backward})"
[[ -n $keep ]] && echo "sass-diff: listings in $work/a and $work/b"
if [[ $((same + differ)) -eq 0 ]]; then
  echo "sass-diff: no kernel's SASS was read (cuobjdump $cuobjdump)" >&2
  exit 2
fi
[[ $differ -eq 0 ]]
