"""The backward (and forward) of (head_dim, head_dim_v) pairs, causal bf16 (or a causal document
mask, --docs), in alternating batches of several attnc builds and of cuDNN (torch SDPA's backend,
where it takes the pair): per pair each one's median TFLOP/s and the ratios to the first build.
For changes that move a pair from one kernel to another (which `attnc explain --backward` names),
measured in one process so that all see the same clocks. dQ, dK and dV of every build are
checked against the first build's.

  python3 dev/bench/head_dim_pairs.py --lib A.so [--lib B.so] [--pair 192,64]... [--n 4096]
      [--rounds 16] [--docs 8 [--position-docs]] [--deterministic]

FLOPs: forward 2 B H N^2 (d + d_v) x the unmasked fraction, backward 2.5 x that (for d = d_v, the
bench rows' 4 B H N^2 d).
"""
import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "test", "gpu"))
import attnc_ctypes  # noqa: E402
import bench_forward as bf  # noqa: E402


def spec(d, dv, heads, docs, n=0, positions=False):
    if docs and positions:  # the same equal documents from positions alone (no declared input)
        mask = f'mask: "q / {n // docs} == k / {n // docs} && q >= k"\n'
    else:
        mask = ("mask: {document: doc, causal: true}\ninputs:\n  doc: {dtype: i32, dims: [pos]}\n"
                if docs else "mask: causal\n")
    return (f"name: pair_{d}_{dv}\nhead_dim: {d}\nhead_dim_v: {dv}\ndtype: bf16\n"
            f"heads: {heads}\n{mask}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", action="append", required=True)
    ap.add_argument("--pair", action="append", help="d,d_v (repeatable); default 192,64 136,112 176,80")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--docs", type=int, default=0,
                    help="a causal document mask of this many equal documents instead of causal "
                         "(no cuDNN; the backward bench's document row at --docs 8 --n 8192)")
    ap.add_argument("--position-docs", action="store_true",
                    help="with --docs: the documents as a mask of positions alone (q / L == k / L, "
                         "N divisible by --docs), no declared input to read")
    ap.add_argument("--deterministic", action="store_true",
                    help="time the deterministic backward (dQ without atomics) instead")
    args = ap.parse_args()
    pairs = [tuple(int(x) for x in p.split(",")) for p in (args.pair or ["192,64", "136,112", "176,80"])]
    dev = torch.device("cuda")
    libs = [attnc_ctypes.Library(os.path.abspath(p)) for p in args.lib]
    B, H, N = args.batch, args.heads, args.n
    docs = args.docs
    doc = None
    if docs:
        doc = (torch.arange(N, device=dev, dtype=torch.int32) * docs // N).contiguous()
        lens = torch.bincount(doc.long()).double()
        frac = float((lens * (lens + 1) / 2).sum()) / (N * N)
    else:
        frac = (N + 1) / (2 * N)  # causal, q_len == kv_len
    if args.position_docs and (not docs or N % docs):
        sys.exit("--position-docs needs --docs dividing --n")
    inputs = [(doc, "pos")] if docs and not args.position_docs else []
    print(f"| pair (d, d_v) | pass | " + " | ".join(f"{chr(65 + i)}" for i in range(len(libs))) +
          " | cuDNN | " + " | ".join(f"{chr(65 + i)}/A" for i in range(1, len(libs))) + " | A/cuDNN |")
    print("|---|---|" + "---:|" * (2 * len(libs) + 1))
    for d, dv in pairs:
        torch.manual_seed(0)
        q = torch.randn(B, H, N, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(B, H, N, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(B, H, N, dv, device=dev, dtype=torch.bfloat16)
        do = torch.randn(B, H, N, dv, device=dev, dtype=torch.bfloat16)
        fwd_flops = 2.0 * B * H * N * N * (d + dv) * frac
        passes = {"forward": ([], fwd_flops), "backward": ([], 2.5 * fwd_flops)}
        grads = []
        for lib in libs:
            kern = lib.compile_text(spec(d, dv, H, docs, N, args.position_docs), backward=True)
            o = torch.empty(B, H, N, dv, device=dev, dtype=torch.bfloat16)
            lse = torch.empty(B, H, N, device=dev, dtype=torch.float32)
            fargs = kern.make_args(q, k, v, o, lse, inputs, layout="bhsd")
            dq, dk, dv_ = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            ws = torch.empty(kern.backward_workspace_bytes(B, N, args.deterministic), device=dev,
                             dtype=torch.uint8)
            kern.launch(fargs)
            bargs = kern.make_backward_args(q, k, v, o, do, lse, dq, dk, dv_, inputs, layout="bhsd",
                                            deterministic=args.deterministic, workspace=ws)
            for t in (dq, dk, dv_):
                t.fill_(float("nan"))
            kern.launch_backward(bargs)
            torch.cuda.synchronize()
            grads.append((dq.clone(), dk.clone(), dv_.clone()))
            passes["forward"][0].append(lambda kern=kern, a=fargs: kern.launch(a))
            passes["backward"][0].append(lambda kern=kern, a=bargs: kern.launch_backward(a))
        if any(torch.isnan(x).any() for x in grads[0]):
            sys.exit(f"({d}, {dv}): build A's gradients hold NaN")
        for i, g in enumerate(grads[1:], 1):
            errs = [bf.relerr(x, y) for x, y in zip(g, grads[0])]
            if max(errs) > 1e-2 or any(torch.isnan(x).any() for x in g):
                sys.exit(f"({d}, {dv}): build {chr(65 + i)}'s gradients differ from A's: relerr {errs}")
        # cuDNN, where SDPA's backend takes the pair.
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        try:
            if docs:
                raise ValueError("cuDNN has no document mask")
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                out = F.scaled_dot_product_attention(*leaves, is_causal=True)
                torch.autograd.grad(out, leaves, do, retain_graph=True)

                def cudnn_fwd():
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        F.scaled_dot_product_attention(q, k, v, is_causal=True)
                passes["forward"][0].append(cudnn_fwd)
                passes["backward"][0].append(lambda: torch.autograd.grad(out, leaves, do, retain_graph=True))
            has_cudnn = True
        except Exception:  # noqa: BLE001
            has_cudnn = False
        for name, (fns, flops) in passes.items():
            inners = [bf.batch_size(fn) for fn in fns]
            for fn, inner in zip(fns, inners):
                bf.warm_up(fn, inner, 300)
            times = [[] for _ in fns]
            for _ in range(args.rounds):
                for i, (fn, inner) in enumerate(zip(fns, inners)):
                    times[i].append(bf.one_batch(fn, inner))
            tf = [flops / (statistics.median(t) * 1e-3) / 1e12 for t in times]
            cells = [f"{x:.0f}" for x in tf[:len(libs)]]
            cudnn = f"{tf[-1]:.0f}" if has_cudnn else "-"
            ratios = [f"{x / tf[0]:.3f}" for x in tf[1:len(libs)]]
            vs = f"{tf[0] / tf[-1]:.2f}" if has_cudnn else "-"
            print(f"| ({d}, {dv}) | {name} | " + " | ".join(cells) + f" | {cudnn} | " +
                  " | ".join(ratios) + f" | {vs} |", flush=True)
    for i, p in enumerate(args.lib):
        print(f"- {chr(65 + i)}: {p}")
    mask = f"document x{docs} causal (equal documents)" if docs else "causal"
    if args.position_docs:
        mask += " written as a mask of positions"
    if args.deterministic:
        mask += ", the deterministic backward"
    print(f"- {mask} bf16, B={B}, H={H}, N={N}, BHSD; TFLOP/s = 2 B H N^2 (d + d_v) x {frac:.4f} "
          f"(x 2.5 backward) / median time of {args.rounds} alternating batches of >= 3 ms")


if __name__ == "__main__":
    main()
