"""Where a sm_90a forward (or, with --backward, dK/dV kernel) block's time goes: builds bench rows'
kernels with their per-block timeline (ATTNC_TIMELINE=1, templates/attnc/sm90/timeline.h:
%globaltimer stamps written where the LSE goes, 16 words a block), runs each once warm, and prints
per row the medians of the phases from each block's start, the time per kv tile (q tile) after the
first, each block's fixed share (its time minus tiles x that per-tile median) and the gaps between
blocks on an SM. Needs a GPU with the sm_90a kernels (an H100/H200), torch and libattnc.so; the
timeline kernels are cached apart from the plain ones, and their results mean nothing (the forward
writes no LSE; the dK/dV kernel writes over the LSE it reads), so nothing else should share the
process. The backward's O and LSE come from a plain forward (compiled with ATTNC_TIMELINE=0).

  python3 dev/bench/timeline.py [--lib .device/bundle/libattnc.so] [--backward] --only ROW [--only ROW ...]
"""
import argparse
import os
import sys

os.environ["ATTNC_TIMELINE"] = "1"  # read by the JIT at each compile

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))  # the bench rows and their setup
import bench_backward as bb  # noqa: E402
import bench_forward as bf  # noqa: E402

# The record's words (timeline.h TimelineWord).
SM, START, Q_ISSUED, K_ISSUED, FIRST_K, Q, FIRST_TILE, LOOP_END, END = range(9)
FIRST_K1, FIRST_TILE1, LOOP_END1, END1, TILES, PARTIALS = range(9, 15)
MAGIC, MAGIC_VALUE = 15, 0xABCD
# The dK/dV kernel's record (timeline.h BwdTimelineWord); SM, START and MAGIC as above.
B_KV_ISSUED, B_STAGE_ISSUED, B_KV, B_FIRST_TILE, B_LOOP_END, B_DQ, B_END = 2, 3, 5, 6, 7, 8, 9
B_LOOP_END1, B_END1, B_TILES = 10, 11, 12


def since(w, a, b):
    """Nanoseconds from word a to word b of each record (32-bit stamps, so modulo 2^32)."""
    return (w[:, b].astype(np.int64) - w[:, a].astype(np.int64)) % (1 << 32)


def occupancy(name, w, ends, tiles, unit):
    """Prints the row's line: blocks, SMs, span, how busy the SMs were and the gaps between blocks."""
    start = (w[:, START].astype(np.int64) - int(w[:, START].min())) % (1 << 32)
    stop = start + ends
    busy, gaps = 0, []
    sms = w[:, SM]
    for sm in np.unique(sms):
        order = np.argsort(start[sms == sm])
        s, e = start[sms == sm][order], stop[sms == sm][order]
        busy += int((e - s).sum())
        gaps += list(s[1:] - e[:-1])
    n_sm = len(np.unique(sms))
    span = int(stop.max())
    print(f"## {name}: {len(w)} blocks on {n_sm} SMs, {span / 1e3:.1f} us; SMs busy "
          f"{busy / (n_sm * span):.1%}; gap between blocks on an SM median "
          f"{np.median(gaps) if gaps else 0:.0f} ns; {unit} a block median {np.median(tiles):.0f} "
          f"(mean {tiles.mean():.1f})")


def print_phases(phases, fixed, lend):
    print("| phase (ns from the block's start unless a span) | median | p10 | p90 |")
    print("|---|---:|---:|---:|")
    for label, x in phases:
        print(f"| {label} | {np.median(x):.0f} | {np.percentile(x, 10):.0f} | {np.percentile(x, 90):.0f} |")
    print(f"- fixed per block (block - tiles x the per-tile median): median {np.median(fixed):.0f} ns,"
          f" {fixed.sum() / lend.sum():.1%} of all blocks' time", flush=True)


def forward_phases(lw, per_tile):
    return [
        ("Q issued", since(lw, START, Q_ISSUED)),
        ("first K (and V) issued", since(lw, START, K_ISSUED)),
        ("consumer 0 holds the first K", since(lw, START, FIRST_K)),
        ("consumer 0 holds Q", since(lw, START, Q)),
        ("consumer 0's first S + softmax done", since(lw, START, FIRST_TILE)),
        ("consumer 1's first S + softmax done", since(lw, START, FIRST_TILE1)),
        ("consumer 0's loop (span)", since(lw, FIRST_TILE, LOOP_END)),
        ("per kv tile after the first (span / tiles)", per_tile),
        ("consumer 0's output (span)", since(lw, LOOP_END, END)),
    ]


def backward_phases(lw, per_tile):
    return [
        ("K and V issued", since(lw, START, B_KV_ISSUED)),
        ("first q tile's Q and dO issued", since(lw, START, B_STAGE_ISSUED)),
        ("consumer 0 holds K, V and the first stage", since(lw, START, B_KV)),
        ("consumer 0's first q tile done", since(lw, START, B_FIRST_TILE)),
        ("consumer 0's loop (span)", since(lw, B_FIRST_TILE, B_LOOP_END)),
        ("per q tile after the first (span / tiles)", per_tile),
        ("consumer 0's last dQ (span)", since(lw, B_LOOP_END, B_DQ)),
        ("consumer 0's dK and dV stores (span)", since(lw, B_DQ, B_END)),
    ]


def report(name, w, backward=False):
    """Prints a row's blocks and phases from its records (the forward's, or the dK/dV kernel's)."""
    end, end1, first_tile, loop_end, tiles_word = (
        (B_END, B_END1, B_FIRST_TILE, B_LOOP_END, B_TILES) if backward
        else (END, END1, FIRST_TILE, LOOP_END, TILES))
    w = w[w[:, MAGIC] == MAGIC_VALUE]
    if len(w) == 0:
        kernel = "dK/dV kernel" if backward else "forward"
        print(f"## {name}: no block wrote a record (not the sm_90a {kernel}?)")
        return
    ends = np.maximum(since(w, START, end), since(w, START, end1))
    live = (w[:, first_tile] != 0) & (w[:, end] != 0) & (w[:, tiles_word] > 0)
    lw, lend = w[live], ends[live]
    tiles = lw[:, tiles_word].astype(np.int64)
    per_tile = since(lw, first_tile, loop_end) / np.maximum(tiles - 1, 1)
    fixed = lend - tiles * np.median(per_tile)
    occupancy(name, w, ends, tiles, "q tiles" if backward else "kv tiles")
    phases = (backward_phases if backward else forward_phases)(lw, per_tile)
    print_phases(phases + [("block", lend)], fixed, lend)
    if not backward:
        partial_costs(lw, tiles)


def partial_costs(lw, tiles):
    """The forward's cost of a kv tile masked per element against one that is not: a least-squares
    fit of consumer 0's loop span (its tiles after the first, and the last P V) to the counts of
    both kinds, and of the first tile's time (block start to its softmax) to whether it was masked."""
    later_partial = (lw[:, PARTIALS] & 0xFFFF).astype(np.int64)
    first_partial = (lw[:, PARTIALS] >> 16) & 1
    later_full = tiles - 1 - later_partial
    span = since(lw, FIRST_TILE, LOOP_END).astype(np.float64)
    a = np.stack([later_full, later_partial, np.ones_like(later_full)], axis=1).astype(np.float64)
    if np.linalg.matrix_rank(a) < 3:
        print(f"- tiles masked per element: {later_partial.sum()} of {(tiles - 1).sum()} later "
              f"tiles; too little variety for a fit")
        return
    (full_ns, partial_ns, const_ns), *_ = np.linalg.lstsq(a, span, rcond=None)
    first = since(lw, START, FIRST_TILE)
    firsts = [f"{'masked' if m else 'unmasked'} {np.median(first[first_partial == m]):.0f} ns "
              f"({int((first_partial == m).sum())} blocks)" for m in (0, 1) if (first_partial == m).any()]
    print(f"- tiles masked per element: {later_partial.sum()} of {(tiles - 1).sum()} later tiles;"
          f" fit of the loop span: {full_ns:.0f} ns a whole tile, {partial_ns:.0f} ns a masked one,"
          f" {const_ns:.0f} ns besides; first tile done (median): {', '.join(firsts)}", flush=True)


def run_backward(lib, row, dev, warm):
    """Launches the row's dK/dV kernel (the whole backward call) warm, then once recorded."""
    q, k, v, do, doc = bb.row_tensors(row, dev)
    inputs = [(doc, "pos")] if doc is not None else []
    os.environ["ATTNC_TIMELINE"] = "0"  # a plain forward for O and the LSE
    plain = lib.compile_text(bf.spec_of(row))
    os.environ["ATTNC_TIMELINE"] = "1"
    kern = lib.compile_text(bf.spec_of(row), backward=True)
    args, _, lse, *_ = bb.backward_args(kern, q, k, v, do, inputs, forward_kernel=plain)
    stream = torch.cuda.current_stream().cuda_stream
    for _ in range(warm):
        kern.launch_backward(args, stream)
    torch.cuda.synchronize()
    lse.zero_()
    kern.launch_backward(args, stream)
    torch.cuda.synchronize()
    return lse


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=None, help="libattnc.so (default: test/gpu/attnc_ctypes's)")
    ap.add_argument("--only", action="append", required=True, help="bench rows whose name contains this")
    ap.add_argument("--warm", type=int, default=20, help="untimed launches before the recorded one")
    ap.add_argument("--backward", action="store_true", help="the dK/dV kernel instead of the forward")
    args = ap.parse_args()
    lib = bf.attnc_ctypes.Library(args.lib)
    dev = torch.device("cuda")
    stream = torch.cuda.current_stream().cuda_stream
    for row in bf.rows(False):
        if not bf.selected(row, args.only):
            continue
        if args.backward:
            words = run_backward(lib, row, dev, args.warm).view(torch.int32).flatten().cpu().numpy()
            words = words.astype(np.uint32)
            report(row.name, words[: words.size // 16 * 16].reshape(-1, 16), backward=True)
            continue
        q, k, v, doc = bf.row_inputs(row, dev)
        kern = lib.compile_text(bf.spec_of(row))
        o = torch.empty_like(q)
        lse = torch.zeros(row.b, row.hq, row.n, device=dev, dtype=torch.float32)
        a = kern.make_args(q, k, v, o, lse, [(doc, "pos")] if doc is not None else [],
                           seed=42, offset=0, layout="bhsd")
        for _ in range(args.warm):
            kern.launch(a, stream)
        torch.cuda.synchronize()
        lse.zero_()
        kern.launch(a, stream)
        torch.cuda.synchronize()
        words = lse.view(torch.int32).flatten().cpu().numpy().astype(np.uint32)
        report(row.name, words[: words.size // 16 * 16].reshape(-1, 16))
    return 0


if __name__ == "__main__":
    sys.exit(main())
