"""Grid-size sweep of the unmasked forward: the same kernel at batch sizes whose grids end on a
whole wave of 132 one-block SMs or part of one, attnc and cuDNN in alternating batches, so that a
last wave that leaves SMs idle shows as a dip in TFLOP/s at the partial-wave sizes. Rows: hd128
full N=4K, 2 heads, batch 30-34 (1920-2176 blocks of 128 rows: 14.5, 15.03, 15.5, 16.0, 16.5
waves), the bench's own shape (batch 4 x 16 heads), hd64 full N=4K with 4 heads, batch 31-33.

  python3 dev/bench/waves.py [--lib .device/bundle/libattnc.so] [--rounds 15]
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

SHAPES = [(128, 2, 4096, (30, 31, 32, 33, 34)), (128, 16, 4096, (4,)), (64, 4, 4096, (31, 32, 33))]
BLOCK_Q = {64: 192, 128: 128}  # the sm_90a forward's rows a block (attnc explain)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=None)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    lib = attnc_ctypes.Library(args.lib)
    stream = torch.cuda.current_stream().cuda_stream
    print("| hd | heads | batch | blocks | waves | attnc | cuDNN | attnc/cuDNN | relerr |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for hd, heads, n, batches in SHAPES:
        kern = lib.compile_text(f"name: waves_{hd}_{heads}\nhead_dim: {hd}\ndtype: bf16\n"
                                f"heads: {{q: {heads}, kv: {heads}}}\nmask: none\nscore: none\n")
        for b in batches:
            torch.manual_seed(0)
            q, k, v = (torch.randn(b, heads, n, hd, device="cuda", dtype=torch.bfloat16)
                       for _ in range(3))
            o = torch.full_like(q, float("nan"))
            lse = torch.empty(b, heads, n, device="cuda")
            a = kern.make_args(q, k, v, o, lse, [], layout="bhsd")

            def ours():
                kern.launch(a, stream)

            def cudnn():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v)

            inner = [bf.batch_size(f) for f in (ours, cudnn)]
            for f, i in zip((ours, cudnn), inner):
                bf.warm_up(f, i, 300)
            times = ([], [])
            for _ in range(args.rounds):
                for t, f, i in zip(times, (ours, cudnn), inner):
                    t.append(bf.one_batch(f, i))
            err = bf.relerr(o, cudnn())
            flops = 4.0 * b * heads * n * n * hd
            mine, theirs = (flops / statistics.median(t) / 1e9 for t in times)
            blocks = b * heads * -(-n // BLOCK_Q[hd])
            print(f"| {hd} | {heads} | {b} | {blocks} | {blocks / 132:.2f} | {mine:.0f} | "
                  f"{theirs:.0f} | {mine / theirs:.3f} | {err:.1e} |")


if __name__ == "__main__":
    main()
