#!/usr/bin/env bash
# A case is a function of (seed, case number) alone: cases 20-29 printed on their own equal the
# same cases printed within a run from case 0, and a second run prints the same text. The
# reproduction command a failure prints (--seed S --first N --cases 1) depends on it.
#   deterministic.sh ATTNC_SPEC_FUZZ
set -euo pipefail
fuzz=$1
all=$("$fuzz" --print --seed=5 --cases=40 | sed -n '/^# case 20:/,/^# case 30:/p' | sed '$d')
slice=$("$fuzz" --print --seed=5 --first=20 --cases=10)
again=$("$fuzz" --print --seed=5 --first=20 --cases=10)
[[ -n $slice && $all == "$slice" && $slice == "$again" ]] ||
  { echo "deterministic.sh: cases 20-29 of seed 5 differ between runs" >&2; exit 1; }
echo "deterministic.sh: cases 20-29 of seed 5 are the same in three runs"
