"""Forward (or, with --backward, backward) A/B of several attnc builds in one process, in
alternating batches: per bench row (bench_forward.py's names), each build's kernel on the same
tensors, and cuDNN's where the row has it, warmed up, then R rounds of one batch each in turn (A,
B, ..., cuDNN, A, B, ...), so that all see the same clocks, power and temperature; prints each
one's median TFLOP/s and the ratios to the first build. One torch start and one compile per build
and row, so it takes a fraction of ab.py's time (which starts a bench process per build and
round). Outputs are checked against the first build's (same inputs; dropout rows compare the same
seed; the backward compares dQ).

  python3 dev/bench/ab_mix.py --lib A.so --lib B.so [--lib C.so] [--backward] [--rounds 40] \
      --only "hd128 full N=4K"
"""
import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))  # the bench rows and their setup
import bench_backward as bb  # noqa: E402
import bench_forward as bf  # noqa: E402


def forward_fns(libs, row, dev):
    """Per build a launch of its forward kernel and the output it writes; then cuDNN's where the row
    has it. Returns (fns, outs, flops)."""
    B, H, HK, N, D = row.b, row.hq, row.hkv, row.n, row.hd
    q, k, v, doc = bf.row_inputs(row, dev)
    flops = 4.0 * B * H * N * N * D * bf.unmasked_fraction(row, doc, dev)
    stream = torch.cuda.current_stream().cuda_stream
    fns, outs = [], []
    for lib in libs:
        kern = lib.compile_text(bf.spec_of(row))
        o = torch.full_like(q, float("nan"))
        lse = torch.empty(B, H, N, device=dev, dtype=torch.float32)
        a = kern.make_args(q, k, v, o, lse, [(doc, "pos")] if doc is not None else [],
                           seed=42, offset=0, layout="bhsd")
        fns.append(lambda kern=kern, a=a: kern.launch(a, stream))
        outs.append(o)
    if row.plain:
        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=row.mask == "causal",
                                                      scale=1.0 / D ** 0.5, dropout_p=row.dropout,
                                                      enable_gqa=H != HK)
        fns.append(cudnn)
    return fns, outs, flops


def backward_fns(libs, row, dev):
    """As forward_fns, for the backward: each build's backward launch (after its own forward) and
    the dQ it writes; cuDNN's backward through autograd."""
    B, H, HK, N, D = row.b, row.hq, row.hkv, row.n, row.hd
    q, k, v, do, doc = bb.row_tensors(row, dev)
    flops = 2.5 * 4.0 * B * H * N * N * D * bf.unmasked_fraction(row, doc, dev)
    stream = torch.cuda.current_stream().cuda_stream
    inputs = [(doc, "pos")] if doc is not None else []
    fns, outs = [], []
    for lib in libs:
        kern = lib.compile_text(bf.spec_of(row), backward=True)
        o = torch.empty_like(q)
        lse = torch.empty(B, H, N, device=dev, dtype=torch.float32)
        kern.forward(q, k, v, o, lse, inputs, seed=42, offset=0, layout="bhsd")
        dq = torch.full_like(q, float("nan"))
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        ws = torch.empty(kern.backward_workspace_bytes(B, N), device=dev, dtype=torch.uint8)
        a = kern.make_backward_args(q, k, v, o, do, lse, dq, dk, dv, inputs, 42, 0, "bhsd", False, ws)
        # (the struct keeps the tensors it points at alive: attnc_ctypes._fill_shared)
        fns.append(lambda kern=kern, a=a: kern.launch_backward(a, stream))
        outs.append(dq)
    if row.plain:
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = F.scaled_dot_product_attention(*leaves, is_causal=row.mask == "causal",
                                                 scale=1.0 / D ** 0.5, dropout_p=row.dropout,
                                                 enable_gqa=H != HK)

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.autograd.grad(out, leaves, do, retain_graph=True)
        fns.append(cudnn)
    return fns, outs, flops


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", action="append", required=True, help="a libattnc.so (repeat: first is the base)")
    ap.add_argument("--only", action="append", required=True, help="bench rows whose name contains this")
    ap.add_argument("--backward", action="store_true", help="time the backward instead of the forward")
    ap.add_argument("--rounds", type=int, default=40, help="timed batches per build, alternating")
    ap.add_argument("--warm-ms", type=float, default=500.0, help="untimed ms per build before the rounds")
    args = ap.parse_args()
    if len(args.lib) < 2:
        ap.error(f"--lib: expected at least two builds, got {len(args.lib)}")
    libs = [bf.attnc_ctypes.Library(path) for path in args.lib]
    dev = torch.device("cuda")
    names = "ABCDEFGH"
    header = ["row"] + [f"{names[i]}" for i in range(len(libs))] + ["cuDNN"] + \
        [f"{names[i]}/A" for i in range(1, len(libs))]
    print("| " + " | ".join(header) + " |")
    print("|---" * len(header) + "|", flush=True)
    for row in bf.rows(False):
        if not bf.selected(row, args.only):
            continue
        fns, outs, flops = (backward_fns if args.backward else forward_fns)(libs, row, dev)
        for fn in fns:
            fn()
        torch.cuda.synchronize()
        diffs = [bf.relerr(o, outs[0]) for o in outs[1:]]
        inner = [bf.batch_size(fn) for fn in fns]
        for fn, n in zip(fns, inner):
            bf.warm_up(fn, n, args.warm_ms)
        times = [[] for _ in fns]
        for _ in range(args.rounds):
            for i, fn in enumerate(fns):
                times[i].append(bf.one_batch(fn, inner[i]))
        tflops = [flops / statistics.median(t) / 1e9 for t in times]
        cells = [f"{x:.0f}" for x in tflops[:len(libs)]] + \
            [f"{tflops[-1]:.0f}" if len(fns) > len(libs) else "-"] + \
            [f"{x / tflops[0]:.3f}" for x in tflops[1:len(libs)]]
        print(f"| {row.name} | " + " | ".join(cells) + " |", flush=True)
        bad = [f"{names[i + 1]} {d:.1e}" for i, d in enumerate(diffs) if not d < 1e-2]
        if bad:
            print(f"- {row.name}: output differs from A's: {', '.join(bad)}", flush=True)
    for i, path in enumerate(args.lib):
        print(f"- {names[i]}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
