"""Forward attnc against cuDNN, three ways on the same tensors: sequentially as bench_forward.py
timed them before its warm-up (all of one implementation's batches, then all of the other's; with
--rounds R, R passes), each at steady state (after --warm-ms of untimed calls, in both orders, with
nvidia-smi's SM clock and power over the run), and in alternating batches, so that both see the same
clocks, power and temperature. Prints, per row and method, the medians and their ratio.

  python3 dev/bench/interleave.py [--lib L] [--rounds 3] --only "hd128 full N=4K"
"""
import argparse
import math
import os
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))  # the bench rows and their setup
import bench_forward as bf  # noqa: E402


def smi():
    q = "clocks.sm,power.draw,temperature.gpu"
    try:
        return subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001
        return "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=25)
    ap.add_argument("--warm-ms", type=float, default=1000.0)
    ap.add_argument("--only", action="append", required=True)
    args = ap.parse_args()
    lib = bf.attnc_ctypes.Library(args.lib)
    dev = torch.device("cuda")
    print(f"{'row':32} {'method':12} {'attnc':>7} {'cudnn':>7} {'ratio':>6}  smi after")
    for row in bf.rows(False):
        if not bf.selected(row, args.only):
            continue
        B, H, HK, N, D = row.b, row.hq, row.hkv, row.n, row.hd
        q, k, v, _ = bf.row_inputs(row, dev)
        flops = 4.0 * B * H * N * N * D * bf.unmasked_fraction(row, None, dev)
        kern = lib.compile_text(bf.spec_of(row))
        o = torch.empty_like(q)
        lse = torch.empty(B, H, N, device=dev, dtype=torch.float32)
        a = kern.make_args(q, k, v, o, lse, [], seed=42, offset=0, layout="bhsd")
        stream = torch.cuda.current_stream().cuda_stream
        causal = row.mask == "causal"

        def attnc_fn():
            kern.launch(a, stream)

        def cudnn_fn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=1.0 / math.sqrt(D),
                                                      enable_gqa=H != HK)
        ref = cudnn_fn()
        o.fill_(float("nan"))
        attnc_fn()
        torch.cuda.synchronize()
        err = bf.relerr(o, ref)
        assert err < 1e-2, f"{row.name}: relerr {err}"
        fns = {"attnc": attnc_fn, "cudnn": cudnn_fn}
        inner = {n: bf.batch_size(f) for n, f in fns.items()}
        tf = lambda ms: flops / (ms * 1e-3) / 1e12  # noqa: E731
        for r in range(args.rounds):
            med = {}
            for n, f in fns.items():
                for _ in range(3):
                    f()
                med[n] = statistics.median(bf.one_batch(f, inner[n]) for _ in range(args.batches))
            print(f"{row.name:32} {'sequential':12} {tf(med['attnc']):7.0f} {tf(med['cudnn']):7.0f} "
                  f"{med['cudnn'] / med['attnc']:6.3f}  {smi()}", flush=True)
        for order in (("attnc", "cudnn"), ("cudnn", "attnc")):
            med, pw = {}, {}
            for n in order:
                with bf.Sampler() as smp:
                    med[n] = bf.time_ms(fns[n], reps=args.batches, warm_ms=args.warm_ms)[0]
                pw[n] = f"{n} {smp.mhz:.0f} MHz {smp.watts:.0f} W"
            print(f"{row.name:32} {'steady ' + order[0][:2]:12} {tf(med['attnc']):7.0f} {tf(med['cudnn']):7.0f} "
                  f"{med['cudnn'] / med['attnc']:6.3f}  {pw['attnc']}; {pw['cudnn']}", flush=True)
        times = {n: [] for n in fns}
        for _ in range(args.batches * args.rounds):
            for n, f in fns.items():
                times[n].append(bf.one_batch(f, inner[n]))
        med = {n: statistics.median(t) for n, t in times.items()}
        print(f"{row.name:32} {'interleaved':12} {tf(med['attnc']):7.0f} {tf(med['cudnn']):7.0f} "
              f"{med['cudnn'] / med['attnc']:6.3f}  {smi()}", flush=True)
        del q, k, v, o, lse, ref
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
