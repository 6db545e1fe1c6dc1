"""A/B of two (or more) builds of libattnc.so on the same GPU in one process tree: the forward or
backward bench runs once per build per round, builds alternating (A, B, A, B, ...) so that clock
and thermal drift hit both, FlexAttention skipped; then one line per row with every run's attnc
TFLOP/s (cuDNN's from the same pass in brackets) and the median of each build against the first.
Needs what bench/run.sh needs.
  python3 dev/bench/ab.py --lib .device/bundle/libattnc.so --lib .device/bundleB/libattnc.so \
      [--backward] [--rounds 2] [--timeout 120] --only "hd128 causal N=4K" --only ALiBi
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench")  # the benches it runs, beside the tables they make


def table(md_path):
    """{row: (attnc, cudnn or None)} from the markdown table a bench pass wrote."""
    out, columns = {}, None
    if not os.path.exists(md_path):
        return out
    for line in open(md_path):
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if columns is None:
            columns = cells
            continue
        if cells[0].startswith("-") or len(cells) != len(columns):
            continue
        row = dict(zip(columns, cells))
        number = lambda v: float(v) if v not in ("", "-") else None
        # A row's name without what varies between runs (the dropout row names SDPA's own speed).
        name = re.sub(r"\s*\(SDPA efficient:[^)]*\)$", "", cells[0])
        out[name] = (number(row.get("attnc", "-")), number(row.get("cuDNN", "-")))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", action="append", required=True, help="a libattnc.so (repeat: first is the base)")
    ap.add_argument("--only", action="append", required=True, help="bench rows whose name contains this")
    ap.add_argument("--backward", action="store_true", help="bench_backward.py instead of bench_forward.py")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=120, help="seconds per bench pass")
    args = ap.parse_args()
    if len(args.lib) < 2:
        ap.error("--lib: expected at least two builds, got one")
    script = os.path.join(BENCH, "bench_backward.py" if args.backward else "bench_forward.py")
    runs = {lib: [] for lib in args.lib}  # lib -> [table per round]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for i, lib in enumerate(args.lib):
                md = os.path.join(tmp, f"{r}-{i}.md")
                cmd = [sys.executable, script, "--no-flex", "--lib", lib, "--md", md]
                for text in args.only:
                    cmd += ["--only", text]
                try:
                    subprocess.run(cmd, timeout=args.timeout, stdout=subprocess.DEVNULL, check=False)
                except subprocess.TimeoutExpired:
                    print(f"ab: round {r + 1}, {lib}: timed out after {args.timeout} s", file=sys.stderr)
                runs[lib].append(table(md))
    rows = []
    for t in runs[args.lib[0]] + [t for lib in args.lib[1:] for t in runs[lib]]:
        rows += [row for row in t if row not in rows]
    names = "ABCDEFGH"
    print("| row | " + " | ".join(f"{names[i]}: attnc (cuDNN)" for i in range(len(args.lib)))
          + "".join(f" | {names[i]}/A" for i in range(1, len(args.lib))) + " |")
    print("|---" * (1 + 2 * len(args.lib) - 1) + "|")
    for row in rows:
        cells, medians = [], []
        for lib in args.lib:
            vals = [t[row] for t in runs[lib] if row in t and t[row][0] is not None]
            cells.append(", ".join(f"{a:.0f}" + (f" ({c:.0f})" if c else "") for a, c in vals) or "-")
            medians.append(statistics.median(a for a, _ in vals) if vals else None)
        ratios = [f"{m / medians[0]:.3f}" if m and medians[0] else "-" for m in medians[1:]]
        print(f"| {row} | " + " | ".join(cells + ratios) + " |")
    for i, lib in enumerate(args.lib):
        print(f"- {names[i]}: {lib}")


if __name__ == "__main__":
    main()
