#!/usr/bin/env python3
"""The Hopper fast path's speed targets, checked against one bench run: the forward rows
(bench_forward.py, the "targets" section of docs/perf/H200.md) or the backward ones
(bench_backward.py, docs/perf/H200-backward.md). Also runs on its own (no torch needed) over a
JSON of the run's results:  python3 bench/targets.py [--backward] fwd.json
"""
import json
import sys

VARIANTS = ("window", "prefix-LM", "document", "ALiBi", "softcap")


def target_of(row):
    """(peer, factor) the row must reach, or None for rows without a target (N < 4K)."""
    name = row["row"]
    if name.startswith("dropout"):
        return "cudnn", 1.5
    if name.startswith(VARIANTS):
        return "flex", 1.5
    if name.startswith("GQA"):
        return "cudnn", 1.05
    if name.startswith(("hd64 ", "hd128 ", "hd256 ")) and row["N"] >= 4096:
        return "cudnn", 1.05
    return None


def backward_target_of(row):
    """(peer, factor) a backward row must reach, or None: hd128 (full and causal, N >= 4K) at least
    cuDNN's speed, the variant rows 1.5x FlexAttention, dropout 1.5x cuDNN's."""
    name = row["row"]
    if name.startswith("dropout"):
        return "cudnn", 1.5
    if name.startswith(VARIANTS):
        return "flex", 1.5
    if name.startswith("hd128 ") and row["N"] >= 4096:
        return "cudnn", 1.0
    return None


def target_lines(results, backward=False):
    if backward:
        lines = ["## Targets of the Hopper fast path (backward)", "",
                 "attnc / peer in this run, against: >= 1.0x cuDNN for hd128 (full and causal, N >= 4K); "
                 ">= 1.5x FlexAttention for each variant row; >= 1.5x cuDNN with dropout.", ""]
    else:
        lines = ["## Targets of the Hopper fast path (forward)", "",
                 "attnc / peer in this run, against: >= 1.05x cuDNN for hd64, hd128, hd256 (full and "
                 "causal, N >= 4K) and GQA; >= 1.5x FlexAttention for each variant row; >= 1.5x cuDNN "
                 "with dropout.", ""]
    for r in results:
        target = backward_target_of(r) if backward else target_of(r)
        if target is None:
            continue
        peer, factor = target
        a, p = r["tflops"].get("attnc"), r["tflops"].get(peer)
        if a is None or p is None or p != p:  # missing or NaN
            lines.append(f"- {r['row']}: no {peer} measurement")
            continue
        ratio = a / p
        lines.append(f"- {r['row']}: attnc/{peer} = {ratio_text(ratio, factor)} (target {factor}: "
                     f"{'met' if ratio >= factor else 'NOT met'})")
    return lines


def ratio_text(ratio, factor):
    """The ratio to two decimals, or to as many more as it takes not to round it across the target
    (1.497 against 1.5 reads 1.50 to two but is not met)."""
    for decimals in range(2, 7):
        text = f"{ratio:.{decimals}f}"
        if (float(text) >= factor) == (ratio >= factor):
            return text
    return repr(ratio)


if __name__ == "__main__":
    backward = sys.argv[1:2] == ["--backward"]
    with open(sys.argv[2 if backward else 1]) as f:
        print("\n".join(target_lines(json.load(f)["results"], backward)))
